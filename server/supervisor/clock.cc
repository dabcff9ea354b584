#include "server/supervisor/clock.h"

#include "server/store/store.h"

namespace adctl {

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
