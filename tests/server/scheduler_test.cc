#include "server/scheduler/scheduler.h"

#include <gtest/gtest.h>

#include "server/scheduler/device_inventory.h"

namespace adctl {
namespace {

const std::vector<std::string> kFour = {"0", "1", "2", "3"};

TEST(SchedulerTest, FifoWithinPriorityHigherPriorityFirst) {
  auto d = Schedule(kFour, {}, {{"a", 2, 0, 1}, {"b", 2, 5, 2}, {"c", 2, 0, 3}}, "GPU");
  ASSERT_EQ(d.placements.size(), 2u);
  EXPECT_EQ(d.placements[0].job_id, "b");
  EXPECT_EQ(d.placements[0].devices, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(d.placements[1].job_id, "a");
  EXPECT_EQ(d.placements[1].devices, (std::vector<std::string>{"2", "3"}));
  ASSERT_TRUE(d.wait_reasons.count("c"));
  EXPECT_NE(d.wait_reasons["c"].find("waiting for 2 GPUs: 0 free"), std::string::npos)
      << d.wait_reasons["c"];
}

TEST(SchedulerTest, NoBackfillPastABlockedJob) {
  // 1 free; the head needs 2, so the small job behind it waits too (no starvation).
  auto d = Schedule(kFour, {{"0", "x"}, {"1", "x"}, {"2", "y"}},
                    {{"big", 2, 0, 1}, {"small", 1, 0, 2}}, "GPU");
  EXPECT_TRUE(d.placements.empty());
  EXPECT_EQ(d.wait_reasons["big"], "waiting for 2 GPUs: 1 free, in use by x, y");
  EXPECT_EQ(d.wait_reasons["small"], "queued behind big (priority 0, waiting for 2 GPUs)");
}

TEST(SchedulerTest, JobLargerThanTheMachineDoesNotBlockTheQueue) {
  auto d = Schedule({"cpu0", "cpu1"}, {}, {{"huge", 3, 0, 1}, {"ok", 1, 0, 2}}, "CPU slot");
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_id, "ok");
  EXPECT_EQ(d.wait_reasons["huge"], "needs 3 CPU slots but this coordinator has 2");
}

TEST(SchedulerTest, CpuSlotsAndNvmlProbe) {
  auto slots = CpuSlots(2);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[1].name, "cpu1");
  EXPECT_EQ(slots[1].kind, "cpu");
  // Without a driver the probe fails cleanly; with one it lists GPUs. Either way no crash.
  auto gpus = ProbeNvml();
  if (!gpus.ok()) {
    EXPECT_EQ(gpus.status().code(), StatusCode::kUnavailable);
  }
}

}  // namespace
}  // namespace adctl
