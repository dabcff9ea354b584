#include "server/supervisor/change_feed.h"

#include <chrono>

namespace adctl {

void ChangeFeed::Notify() {
  std::lock_guard<std::mutex> lock(mu_);
  ++version_;
  cv_.notify_all();
}

void ChangeFeed::WaitForChange(uint64_t* version, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return version_ != *version || closed_; });
  *version = version_;
}

uint64_t ChangeFeed::version() {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

bool ChangeFeed::SleepUnlessClosed(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [this] { return closed_; });
  return closed_;
}

void ChangeFeed::Open() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = false;
}

void ChangeFeed::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  cv_.notify_all();
}

bool ChangeFeed::closed() {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

}  // namespace adctl
