// Issue 31 item 4, preemption that loses nothing, through the real binaries on 2 CPU slots: a
// 2-rank priority-0 preemptible job is paused (a checkpoint) when a 1-rank priority-10 job
// cannot otherwise fit, goes back to the queue by itself and resumes from that checkpoint on the
// loss curve of an uninterrupted run; with resources.allow_shrink it resumes at once on the one
// free slot (train.grad_accum 2, the global batch kept). A non-preemptible job is never touched,
// and `adctl set --priority` moves a queued job in the queue.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/harness.h"

namespace adctl::testing {
namespace {

constexpr int kSteps = 16;  // enough that the low job is still training when the high one comes

class PreemptionTest : public CoordinatorTest<2> {
 protected:
  Coordinator& c() { return *coordinator_; }

  // Rank 0's loss at each step, from the job's newest attempt that reached it.
  std::map<int64_t, double> Losses(const std::string& id) {
    auto points = nlohmann::json::parse(
        c().HttpGet("/api/v1/jobs/" + id + "/metrics?max_points=20000"), nullptr, false)["points"];
    std::map<int64_t, std::pair<int, double>> by_step;
    for (const auto& p : points) {
      if (p.value("rank", 0) != 0) continue;
      const int64_t step = std::stoll(p["step"].get<std::string>());
      const int attempt = p.value("attempt", 0);
      auto it = by_step.find(step);
      if (it == by_step.end() || it->second.first <= attempt) {
        by_step[step] = {attempt, p["loss"].get<double>()};
      }
    }
    std::map<int64_t, double> out;
    for (const auto& [step, v] : by_step) out[step] = v.second;
    return out;
  }

  std::string Events(const std::string& id) { return c().Adctl({"events", id}).out; }

  // Submits the uninterrupted run and returns its losses.
  std::map<int64_t, double> Uninterrupted() {
    const std::string id =
        c().Submit(c().WriteSpec("ref.yaml", TinyJobSpec("ref", kSteps, "gpus: 2")));
    EXPECT_EQ(c().Adctl({"wait", id, "--timeout", "240"}).exit_code, 0);
    return Losses(id);
  }

  // Runs the preemptible 2-rank job, preempts it with a 1-rank priority-10 job once it has
  // trained a step, and waits for both to succeed. Returns the low job's id.
  std::string RunPreempted(const std::string& resources, std::string* high_id) {
    const std::string low =
        c().Submit(c().WriteSpec("low.yaml", TinyJobSpec("low", kSteps, resources)));
    c().WaitUntil(
        low, [](const nlohmann::json& j) { return Step(j) >= 1; }, 120, "a first step");
    *high_id =
        c().Submit(c().WriteSpec("high.yaml", TinyJobSpec("high", 2, "gpus: 1, priority: 10")));
    EXPECT_EQ(c().Adctl({"wait", *high_id, "--timeout", "240"}).exit_code, 0);
    EXPECT_EQ(c().Adctl({"wait", low, "--timeout", "240"}).exit_code, 0);
    return low;
  }

  void ExpectSameCurve(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want,
                       double rel) {
    ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
    for (const auto& [step, loss] : want) {
      ASSERT_TRUE(got.count(step)) << "no loss at step " << step;
      EXPECT_NEAR(got.at(step), loss, rel * std::max(1.0, std::abs(loss))) << "step " << step;
    }
  }
};

TEST_F(PreemptionTest, APreemptedJobResumesByItselfOnTheUninterruptedLossCurve) {
  const auto reference = Uninterrupted();
  std::string high;
  const std::string low = RunPreempted("gpus: 2, preemptible: true", &high);
  const std::string events = Events(low);
  EXPECT_NE(events.find("preempted by " + high), std::string::npos) << events;
  EXPECT_NE(events.find("back in the queue after preemption by " + high), std::string::npos)
      << events;
  EXPECT_NE(events.find("training resumed from checkpoint step"), std::string::npos) << events;
  auto job = c().Describe(low);
  EXPECT_EQ(job["state"], "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(job.value("preempted_by", ""), "") << "cleared once it started again";
  EXPECT_GE(job["attempt"].get<int>(), 2);
  EXPECT_EQ(job["gpus"], 2) << "without allow_shrink it waits for both slots";
  // The high job started while the low one was paused, not after it ended.
  auto high_job = c().Describe(high);
  EXPECT_LT(high_job["finished_at"].get<double>(), job["finished_at"].get<double>());
  ExpectSameCurve(Losses(low), reference, 1e-6);
}

TEST_F(PreemptionTest, WithAllowShrinkItResumesOnTheFreeSlotKeepingTheGlobalBatch) {
  const auto reference = Uninterrupted();
  std::string high;
  const std::string low = RunPreempted("gpus: 2, preemptible: true, allow_shrink: true", &high);
  const std::string events = Events(low);
  EXPECT_NE(events.find("1 rank(s) on cpu1 (shrunk from 2 after preemption by " + high +
                        ": train.grad_accum 2, global batch 2 kept)"),
            std::string::npos)
      << events;
  auto job = c().Describe(low);
  EXPECT_EQ(job["gpus"], 1);
  EXPECT_NE(job["spec_yaml"].get<std::string>().find("grad_accum: 2"), std::string::npos);
  // 1 rank accumulating 2 micro-batches sums in another order than 2 ranks' all-reduce.
  ExpectSameCurve(Losses(low), reference, 1e-5);
}

TEST_F(PreemptionTest, NonPreemptibleJobsAreNeverTouchedAndSetPriorityReorders) {
  const std::string fixed =
      c().Submit(c().WriteSpec("fixed.yaml", TinyJobSpec("fixed", 100000, "gpus: 2")));
  c().WaitState(fixed, "RUNNING", 120);
  const std::string a = c().Submit(c().WriteSpec("a.yaml", TinyJobSpec("a", 2, "gpus: 1")));
  const std::string b = c().Submit(c().WriteSpec("b.yaml", TinyJobSpec("b", 2, "gpus: 1")));
  auto waiting = c().WaitUntil(
      b, [](const nlohmann::json& j) { return j.value("wait_reason", "") != ""; }, 30,
      "a wait reason");
  EXPECT_EQ(waiting["wait_reason"], "queued behind " + a + " (priority 0, waiting for 1 CPU slot)");

  // `adctl set` moves b ahead of a: b is now the one waiting for a slot, a is behind it.
  CommandResult set = c().Adctl({"set", b, "--priority", "10"});
  ASSERT_EQ(set.exit_code, 0) << set.out << set.err;
  auto a_now = c().WaitUntil(
      a,
      [&](const nlohmann::json& j) {
        return j.value("wait_reason", "").find("queued behind " + b) == 0;
      },
      30, "a behind b");
  auto b_now = c().Describe(b);
  EXPECT_EQ(b_now["priority"], 10);
  EXPECT_NE(b_now["spec_yaml"].get<std::string>().find("priority: 10"), std::string::npos);
  EXPECT_EQ(b_now["wait_reason"].get<std::string>().rfind("waiting for 1 CPU slot: 0 free", 0), 0u)
      << b_now.dump(2);
  EXPECT_NE(Events(b).find("priority 0 -> 10 by"), std::string::npos) << Events(b);
  // The JSON API does the same, and refuses what is not a priority.
  HttpReply http = c().Http("POST", "/api/v1/jobs/" + a + "/priority", R"({"priority": 20})");
  EXPECT_EQ(http.status, 200) << http.body;
  EXPECT_EQ(http.json["priority"], 20);
  EXPECT_EQ(c().Http("POST", "/api/v1/jobs/" + a + "/priority", R"({"priority": "x"})").status,
            400);
  CommandResult range = c().Adctl({"set", a, "--priority", "2000000"});
  EXPECT_EQ(range.exit_code, 2) << range.out << range.err;
  EXPECT_NE(range.err.find("resources.priority"), std::string::npos) << range.err;

  // Nothing preempted the non-preemptible job for the priority-20 one.
  sleep(2);
  auto still = c().Describe(fixed);
  EXPECT_EQ(still["state"], "JOB_STATE_RUNNING") << still.dump(2);
  EXPECT_EQ(Events(fixed).find("preempted"), std::string::npos) << Events(fixed);
  ASSERT_EQ(c().Adctl({"cancel", fixed}).exit_code, 0);
  EXPECT_EQ(c().Adctl({"wait", a, "--timeout", "240"}).exit_code, 0);
  EXPECT_EQ(c().Adctl({"wait", b, "--timeout", "240"}).exit_code, 0);
  CommandResult ended = c().Adctl({"set", a, "--priority", "1"});
  EXPECT_NE(ended.exit_code, 0);
  EXPECT_NE(ended.err.find("SUCCEEDED"), std::string::npos) << ended.err;
}

}  // namespace
}  // namespace adctl::testing
