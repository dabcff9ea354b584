#include "common/clock.h"

#include <chrono>

namespace adctl {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

class WallClock : public Clock {
 public:
  double Now() const override { return NowSeconds(); }
};

}  // namespace

Clock* SystemClock() {
  static WallClock* clock = new WallClock();
  return clock;
}

}  // namespace adctl
