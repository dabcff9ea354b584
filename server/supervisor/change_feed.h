// "Something changed": a version counter that job operations, the attempt monitor and the
// worker hub bump, and that long polls (WatchJob, StreamLogs, the rendezvous KvGet) wait on.
// Closing it wakes every waiter for good (adctld stopping). Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace adctl {

class ChangeFeed {
 public:
  // Bumps the version and wakes the waiters.
  void Notify();
  // Blocks until the version differs from `*version`, the feed closes, or `timeout_ms` passes;
  // then sets `*version` to the current version.
  void WaitForChange(uint64_t* version, int timeout_ms);
  uint64_t version();

  // Waits `timeout_ms` unless the feed is (or gets) closed; returns whether it is closed.
  bool SleepUnlessClosed(int timeout_ms);
  void Open();
  void Close();
  bool closed();

 private:
  std::mutex mu_;
  std::condition_variable cv_;  // guarded by mu_
  uint64_t version_ = 0;        // guarded by mu_
  bool closed_ = false;         // guarded by mu_
};

}  // namespace adctl
