// What one slow or departed HTTP client can hold of adctld's HTTP side.
//
// cpp-httplib 0.11 (Debian 12's) serves each connection on one thread of a fixed pool and times
// out each read alone, so 32 sockets that send a header byte every few seconds (slowloris), or
// 32 long polls whose clients left, stopped the page, the JSON API, /metrics and /healthz.
// The guard:
//   - gives each connection a thread of its own (TaskQueue), at most `max_connections` at once
//     (more wait for a free one);
//   - gives a request `request_seconds` to arrive whole (request line, headers and body, from
//     the connection's start or the end of its previous answer): a watchdog shuts the socket of
//     one that is late. It finds the server's connections among the process's sockets by their
//     local port (cpp-httplib does not hand its sockets out);
//   - lets a handler ask whether its client has gone (ClientGone), so a long poll ends then,
//     and bounds the long polls in flight (TryStartLongPoll).
// Thread-safe; one guard per HTTP listener.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class TaskQueue;
struct Request;
}  // namespace httplib

namespace adctl {

struct ConnectionGuardOptions {
  double request_seconds = 10;    // a request's line, headers and body arrive within this
  size_t max_connections = 1024;  // connections served at once (a thread each)
  size_t max_long_polls = 256;    // long polls in flight at once
};

class ConnectionGuard {
 public:
  explicit ConnectionGuard(ConnectionGuardOptions options = {});
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // The server's task queue (httplib::Server::new_task_queue); the server owns it.
  httplib::TaskQueue* NewTaskQueue();
  // Starts the watchdog over the connections accepted on `port` (the bound HTTP port).
  void Start(int port);
  void Stop();

  // On the connection's thread: the request has arrived whole (its handler runs), and its
  // answer is written (the connection waits for the next request, with a new deadline).
  void RequestArrived(const httplib::Request& req);
  void AnswerWritten();
  // On the connection's thread, after RequestArrived: the client closed its side.
  bool ClientGone() const;

  // A long poll may start (false: `max_long_polls` are in flight); EndLongPoll when it ends.
  bool TryStartLongPoll();
  void EndLongPoll();

  // Connections whose request was late and whose socket the watchdog shut (for tests, logs).
  int64_t shut_connections() const { return shut_.load(); }

 private:
  struct Connection {
    std::string peer;  // "address:port"
    std::chrono::steady_clock::time_point waiting_since;
    bool in_request = false;  // its request arrived: no deadline until the answer is written
    bool shut = false;
  };
  void Watch();
  void ScanLocked(std::chrono::steady_clock::time_point now);
  int FindLocked(const std::string& peer, std::chrono::steady_clock::time_point now);

  const ConnectionGuardOptions options_;
  int port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<int, Connection> connections_;  // by socket, guarded by mu_
  std::thread watchdog_;
  std::atomic<int64_t> shut_{0};
  std::atomic<size_t> long_polls_{0};
};

}  // namespace adctl
