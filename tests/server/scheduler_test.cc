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

// Four GPUs held by a preemptible low job (2), a non-preemptible low job (1) and a preemptible
// job of priority 5 (1).
const std::map<std::string, std::string> kBusy = {
    {"0", "low"}, {"1", "low"}, {"2", "fixed"}, {"3", "mid"}};
std::vector<RunningJob> Running() {
  return {{"low", 0, 1, true, false, {"0", "1"}},
          {"fixed", 0, 2, false, false, {"2"}},
          {"mid", 5, 3, true, false, {"3"}}};
}

TEST(SchedulerTest, AHigherPriorityJobPreemptsTheLowestPreemptibleJobThatMakesRoom) {
  auto d = Schedule(kFour, kBusy, {{"high", 2, 10, 4}}, "GPU", Running());
  EXPECT_TRUE(d.placements.empty());
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, "low");
  EXPECT_EQ(d.preemptions[0].by, "high");
  EXPECT_EQ(d.wait_reasons["high"], "waiting for 2 GPUs: 0 free; preempting low (priority 0)");
}

TEST(SchedulerTest, OnlyAsManyVictimsAsTheJobNeeds) {
  // One GPU needed: "low" (priority 0) goes first even though "mid" alone would be smaller.
  auto one = Schedule(kFour, kBusy, {{"high", 1, 10, 4}}, "GPU", Running());
  ASSERT_EQ(one.preemptions.size(), 1u);
  EXPECT_EQ(one.preemptions[0].victim, "low");
  // Three GPUs: "low" and "mid"; the non-preemptible "fixed" is never touched.
  auto three = Schedule(kFour, kBusy, {{"high", 3, 10, 4}}, "GPU", Running());
  ASSERT_EQ(three.preemptions.size(), 2u);
  EXPECT_EQ(three.preemptions[0].victim, "low");
  EXPECT_EQ(three.preemptions[1].victim, "mid");
  // Four GPUs cannot be had without "fixed": nobody is preempted for nothing.
  auto four = Schedule(kFour, kBusy, {{"high", 4, 10, 4}}, "GPU", Running());
  EXPECT_TRUE(four.preemptions.empty());
  EXPECT_EQ(four.wait_reasons["high"], "waiting for 4 GPUs: 0 free, in use by fixed, low, mid");
}

TEST(SchedulerTest, EqualOrLowerPriorityNeverPreempts) {
  auto d = Schedule(kFour, kBusy, {{"same", 1, 0, 4}, {"mid2", 1, 5, 5}}, "GPU", Running());
  // mid2 (priority 5) may pause "low" (0) but not "mid" (5); "same" (0) pauses nobody.
  ASSERT_EQ(d.preemptions.size(), 1u);
  EXPECT_EQ(d.preemptions[0].victim, "low");
  EXPECT_EQ(d.preemptions[0].by, "mid2");
  EXPECT_EQ(d.wait_reasons["same"], "queued behind mid2 (priority 5, waiting for 1 GPU)");
}

TEST(SchedulerTest, AJobAlreadyStoppingIsNotPreemptedTwice) {
  auto running = Running();
  running[0].stopping = true;  // "low" is pausing for "high" already
  auto d = Schedule(kFour, kBusy, {{"high", 2, 10, 4}}, "GPU", running);
  EXPECT_TRUE(d.preemptions.empty());
  EXPECT_EQ(d.wait_reasons["high"], "waiting for 2 GPUs: 0 free, low stopping");
}

TEST(SchedulerTest, APreemptedJobShrinksOntoWhatIsFree) {
  // 2 CPU slots, one taken by the job that preempted it: it may run on 1 of its 2 ranks.
  QueuedJob back{"low", 2, 0, 1};
  back.shrink_to = {1};
  auto d = Schedule({"cpu0", "cpu1"}, {{"cpu0", "high"}}, {back}, "CPU slot");
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].devices, (std::vector<std::string>{"cpu1"}));
  // Without shrink_to it waits for both.
  auto w = Schedule({"cpu0", "cpu1"}, {{"cpu0", "high"}}, {{"low", 2, 0, 1}}, "CPU slot");
  EXPECT_TRUE(w.placements.empty());
  EXPECT_EQ(w.wait_reasons["low"], "waiting for 2 CPU slots: 1 free, in use by high");
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
