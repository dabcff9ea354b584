// Wall-clock time, and time as the coordinator sees it: Clock is the seam that lets tests
// advance time by hand (grace periods, restart backoff, the hang watchdog, the store's
// timestamps) instead of sleeping.
//
// Seconds since the Unix epoch, as doubles, the unit of every time the Store records and every
// time a rank reports.
// SystemClock() is thread-safe; ManualClock is too (an atomic).
#pragma once

#include <atomic>

namespace adctl {

// The wall clock, in seconds since the Unix epoch.
double NowSeconds();

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() const = 0;
};

// The wall clock (NowSeconds()). Lives forever.
Clock* SystemClock();

// A clock that moves only when told to: deterministic tests.
class ManualClock : public Clock {
 public:
  explicit ManualClock(double start) : now_(start) {}
  double Now() const override { return now_.load(); }
  void Advance(double seconds) { now_.store(now_.load() + seconds); }

 private:
  std::atomic<double> now_;
};

}  // namespace adctl
