#include "server/http/connection_guard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <functional>

namespace adctl {

namespace {

// The socket of the request this thread serves (RequestArrived to AnswerWritten); -1: none.
thread_local int t_socket = -1;

// "address:port" of a socket's local (`peer` false) or remote end; "" when it has none.
std::string Endpoint(int fd, bool peer, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    *port = ntohs(in->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    *port = ntohs(in6->sin6_port);
  } else {
    return "";
  }
  return std::string(text) + ":" + std::to_string(*port);
}

// A thread per connection, at most `max` at once: a connection waits in the kernel's backlog
// (the listener blocks here) until one ends. shutdown() returns once every connection ended.
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  explicit ThreadPerConnection(size_t max) : max_(max) {}
  ~ThreadPerConnection() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return running_ < max_; });
    ++running_;
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> done(mu_);
      --running_;
      cv_.notify_all();
    }).detach();
  }

  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return running_ == 0; });
  }

 private:
  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t running_ = 0;  // guarded by mu_
};

}  // namespace

ConnectionGuard::ConnectionGuard(ConnectionGuardOptions options) : options_(options) {}

ConnectionGuard::~ConnectionGuard() { Stop(); }

httplib::TaskQueue* ConnectionGuard::NewTaskQueue() {
  return new ThreadPerConnection(options_.max_connections);
}

void ConnectionGuard::Start(int port) {
  std::lock_guard<std::mutex> lock(mu_);
  port_ = port;
  stopping_ = false;
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watch(); });
}

void ConnectionGuard::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void ConnectionGuard::RequestArrived(const httplib::Request& req) {
  const std::string peer = req.remote_addr + ":" + std::to_string(req.remote_port);
  std::lock_guard<std::mutex> lock(mu_);
  t_socket = FindLocked(peer, std::chrono::steady_clock::now());
  if (t_socket >= 0) connections_[t_socket].in_request = true;
}

void ConnectionGuard::AnswerWritten() {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(t_socket);
  if (it != connections_.end()) {
    it->second.in_request = false;
    it->second.waiting_since = std::chrono::steady_clock::now();
  }
  t_socket = -1;
}

bool ConnectionGuard::ClientGone() const {
  if (t_socket < 0) return false;
  pollfd p{t_socket, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

bool ConnectionGuard::TryStartLongPoll() {
  if (++long_polls_ <= options_.max_long_polls) return true;
  --long_polls_;
  return false;
}

void ConnectionGuard::EndLongPoll() { --long_polls_; }

int ConnectionGuard::FindLocked(const std::string& peer,
                                std::chrono::steady_clock::time_point now) {
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [fd, c] : connections_) {
      if (c.peer == peer) return fd;
    }
    if (pass == 0) ScanLocked(now);  // accepted since the watchdog last looked
  }
  return -1;
}

void ConnectionGuard::ScanLocked(std::chrono::steady_clock::time_point now) {
  if (port_ <= 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  std::map<int, Connection> seen;
  const int dir_fd = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dir_fd) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int local_port = 0, peer_port = 0;
    if (Endpoint(static_cast<int>(fd), /*peer=*/false, &local_port).empty() ||
        local_port != port_) {
      continue;
    }
    const std::string peer = Endpoint(static_cast<int>(fd), /*peer=*/true, &peer_port);
    if (peer.empty()) continue;  // the listening socket
    auto known = connections_.find(static_cast<int>(fd));
    if (known != connections_.end() && known->second.peer == peer) {
      seen.emplace(static_cast<int>(fd), known->second);
    } else {
      seen.emplace(static_cast<int>(fd), Connection{peer, now});
    }
  }
  closedir(dir);
  connections_ = std::move(seen);
}

void ConnectionGuard::Watch() {
  const auto period = std::chrono::milliseconds(250);
  const auto allowed = std::chrono::duration<double>(options_.request_seconds);
  auto next_log = std::chrono::steady_clock::now();
  int64_t logged = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    const auto now = std::chrono::steady_clock::now();
    ScanLocked(now);
    for (auto& [fd, c] : connections_) {
      if (c.in_request || c.shut || now - c.waiting_since <= allowed) continue;
      // The same connection still (the socket number could have been reused since the scan).
      int port = 0;
      if (Endpoint(fd, /*peer=*/true, &port) != c.peer) continue;
      ::shutdown(fd, SHUT_RDWR);
      c.shut = true;
      ++shut_;
    }
    if (shut_ > logged && now >= next_log) {
      spdlog::warn(
          "HTTP: closed {} connection(s) whose request did not arrive whole within {:.0f} s",
          shut_ - logged, options_.request_seconds);
      logged = shut_;
      next_log = now + std::chrono::seconds(10);
    }
  }
}

}  // namespace adctl
