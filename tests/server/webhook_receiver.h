// A local webhook receiver for the notification tests (tests/server/queue_notify_test.cc,
// tests/integration/notify_dry_run_test.cc): a real HTTP server on a free port.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace adctl {

// A local webhook receiver: answers 500 to the first `failures` POSTs, then 200; keeps every
// POST it saw. With `hold`, each request waits until Release().
class Receiver {
 public:
  explicit Receiver(int failures = 0, bool hold = false) : failures_(failures), hold_(hold) {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      std::unique_lock<std::mutex> lock(mu_);
      seen_.push_back(req);
      cv_.notify_all();
      cv_.wait(lock, [this] { return !hold_; });
      res.status = static_cast<int>(seen_.size()) <= failures_ ? 500 : 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Receiver() {
    Release();
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  // Waits until `n` POSTs arrived (10 s at most); returns those seen.
  std::vector<httplib::Request> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return seen_.size() >= n; });
    return seen_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = false;
    cv_.notify_all();
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<httplib::Request> seen_;
  const int failures_;
  bool hold_;
};

}  // namespace adctl
