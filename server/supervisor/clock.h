// Time as the coordinator sees it: the seam that lets tests advance time by hand (grace
// periods, restart backoff, the hang watchdog) instead of sleeping.
//
// Seconds since the Unix epoch, as doubles, the unit of every time the Store records.
// SystemClock() is thread-safe; ManualClock is too (an atomic).
#pragma once

#include <atomic>

namespace adctl {

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
