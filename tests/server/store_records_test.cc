// The store's records of what ranks report: ranks, metric points (their thinning and the job's
// progress), checkpoints and pins, validation samples and the rendezvous KV.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/server/store_fixture.h"

namespace adctl {
namespace {

TEST_F(StoreTest, SamplesKeepStepAndPromptAndARenderedStepReplacesItsRows) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-s")).ok());
  const auto sample = [](int64_t step, int index, const std::string& prompt) {
    SampleRecord r;
    r.job_id = "j-s";
    r.attempt = 1;
    r.step = step;
    r.index = index;
    r.prompt = prompt;
    r.mp4 = "samples/step-" + std::to_string(step) + "/" + std::to_string(index) + ".mp4";
    r.gif = "samples/step-" + std::to_string(step) + "/" + std::to_string(index) + ".gif";
    r.render_seconds = 1.5;
    return r;
  };
  ASSERT_TRUE(store_->AddSamples({sample(5, -1, ""), sample(5, 1, "b"), sample(5, 0, "a")}).ok());
  ASSERT_TRUE(store_->AddSamples({sample(2, 0, "a")}).ok());
  auto all = store_->ListSamples("j-s");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].step, 2);
  EXPECT_EQ((*all)[1].prompt, "a");
  EXPECT_EQ((*all)[2].index, 1);
  EXPECT_EQ((*all)[3].index, -1);  // the grid after the prompts
  EXPECT_EQ((*all)[3].render_seconds, 1.5);
  EXPECT_GT((*all)[3].created_at, 0);
  // The same step rendered again by a later attempt: its rows are replaced, not doubled.
  SampleRecord again = sample(2, 0, "a");
  again.attempt = 2;
  ASSERT_TRUE(store_->AddSamples({again}).ok());
  auto two = store_->ListSamples("j-s", 2);
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 1u);
  EXPECT_EQ((*two)[0].attempt, 2);
  EXPECT_TRUE(store_->ListSamples("j-s", 3)->empty());
  // The job's validation_seconds: the latest render's, its grid's time (the whole render) or,
  // without a grid, the samples' sum.
  EXPECT_EQ(store_->GetJob("j-s")->progress.validation_seconds, 1.5);
  SampleRecord grid = sample(7, -1, "");
  grid.render_seconds = 4;
  ASSERT_TRUE(store_->AddSamples({sample(7, 0, "a"), grid}).ok());
  EXPECT_EQ(store_->GetJob("j-s")->progress.validation_seconds, 4);
}

TEST_F(StoreTest, RanksMetricsCheckpointsKv) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-1")).ok());
  TransitionChanges c;
  c.attempt = 1;
  ASSERT_TRUE(store_->Transition("j-1", std::nullopt, JobState::kStarting, "go", c).ok());
  RankRecord r;
  r.job_id = "j-1";
  r.attempt = 1;
  r.rank = 0;
  r.pgid = 1234;
  r.pgid_start_time = 99;
  ASSERT_TRUE(store_->UpsertRank(r).ok());
  ASSERT_TRUE(store_->RecordRankWorker("j-1", 1, 0, 1235, "host", 7.0).ok());
  ASSERT_TRUE(store_->RecordRankExit("j-1", 1, 0, 0, 9).ok());
  auto ranks = store_->ListRanks("j-1", 1);
  ASSERT_TRUE(ranks.ok());
  ASSERT_EQ(ranks->size(), 1u);
  EXPECT_EQ((*ranks)[0].worker_pid, 1235);
  EXPECT_TRUE((*ranks)[0].exited);
  EXPECT_EQ((*ranks)[0].exit_signal, 9);

  MetricRecord m;
  m.job_id = "j-1";
  m.attempt = 1;
  m.step = 3;
  m.total_steps = 6;
  m.loss = 0.5;
  m.gpu_utilization = 0.875;
  m.gpu_memory_used_bytes = int64_t{3} << 32;
  m.gpu_temperature_celsius = 61;
  ASSERT_TRUE(store_->AddMetrics({m, m}).ok());  // duplicate ignored
  auto points = store_->ListMetrics("j-1", 0);
  ASSERT_TRUE(points.ok());
  ASSERT_EQ(points->size(), 1u);
  // The device reading round-trips; what was not measured stays negative.
  EXPECT_EQ((*points)[0].gpu_utilization, 0.875);
  EXPECT_EQ((*points)[0].gpu_memory_used_bytes, int64_t{3} << 32);
  EXPECT_EQ((*points)[0].gpu_temperature_celsius, 61);
  EXPECT_LT((*points)[0].gpu_power_watts, 0);
  EXPECT_LT((*points)[0].gpu_memory_total_bytes, 0);
  EXPECT_EQ(store_->GetJob("j-1")->progress.step, 3);

  CheckpointRecord ck;
  ck.job_id = "j-1";
  ck.attempt = 1;
  ck.step = 2;
  ck.path = "/x/step-000002";
  ASSERT_TRUE(store_->AddCheckpoint(ck).ok());
  EXPECT_EQ(store_->GetJob("j-1")->progress.last_checkpoint_step, 2);
  EXPECT_EQ(store_->ListCheckpoints("j-1")->size(), 1u);

  ASSERT_TRUE(store_->KvSet("j-1", 1, "nccl_id", std::string("a\0b", 3)).ok());
  auto v = store_->KvGet("j-1", 1, "nccl_id");
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(**v, std::string("a\0b", 3));
  EXPECT_FALSE(store_->KvGet("j-1", 2, "nccl_id")->has_value());  // scoped to the attempt
}

// A long run's history stays bounded: over the limit, the older half of a rank's series thins
// out, the newest points keep every step, and the first and last points stay.
TEST_F(StoreTest, ThinningBoundsTheMetricHistoryAndKeepsRecentSteps) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-1")).ok());
  std::vector<MetricRecord> batch;
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 1; step <= 1000; ++step) {
      MetricRecord m;
      m.job_id = "j-1";
      m.attempt = 1;
      m.rank = rank;
      m.step = step;
      m.total_steps = 1000;
      batch.push_back(m);
    }
  }
  ASSERT_TRUE(store_->AddMetrics(batch).ok());
  EXPECT_FALSE(store_->ThinMetrics(2).ok());  // a limit too small to mean anything
  auto removed = store_->ThinMetrics(1000);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 0);  // at the limit, nothing goes
  removed = store_->ThinMetrics(400);
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 2 * 250);  // per rank: every second point of the older 500
  for (int rank = 0; rank < 2; ++rank) {
    auto points = store_->ListMetrics("j-1", 0, rank);
    ASSERT_TRUE(points.ok());
    ASSERT_EQ(points->size(), 750u);
    EXPECT_EQ(points->front().step, 1);
    EXPECT_EQ(points->back().step, 1000);
    EXPECT_EQ((*points)[1].step, 3);
    for (size_t i = 250; i < points->size(); ++i) {  // steps 501..1000, every one
      EXPECT_EQ((*points)[i].step, static_cast<int64_t>(i) + 251) << i;
    }
  }
  // Repeated, it keeps the series under the limit.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store_->ThinMetrics(400).ok());
  EXPECT_LE(store_->ListMetrics("j-1", 0, 0)->size(), 400u);
  EXPECT_EQ(store_->ListMetrics("j-1", 0, 0)->back().step, 1000);
  EXPECT_EQ(store_->GetJob("j-1")->progress.step, 1000);
}

// The readers no other test of this file reaches: counts by state, each rank's newest point
// (with its per-timestep eval), pins, a rank's last error, and a checkpoint's every field.
TEST_F(StoreTest, CountsLatestPointsPinsAndRankErrors) {
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(store_->InsertJob(NewJob("j-" + std::to_string(i))).ok());
  }
  ASSERT_TRUE(store_->Transition("j-3", std::nullopt, JobState::kCancelled, "c").ok());
  auto counts = store_->CountJobsByState();
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(*counts, (std::vector<std::pair<JobState, int64_t>>{{JobState::kQueued, 2},
                                                                {JobState::kCancelled, 1}}));

  std::vector<MetricRecord> points;
  for (int rank = 0; rank < 2; ++rank) {
    for (int step = 1; step <= 3; ++step) {
      MetricRecord m;
      m.job_id = "j-1";
      m.attempt = 1;
      m.rank = rank;
      m.step = step;
      m.samples_seen = 10 * step + rank;
      if (step == 3) m.eval_by_timestep = {{100, 0.5}, {900, 0.125}};
      points.push_back(m);
    }
  }
  ASSERT_TRUE(store_->AddMetrics(points).ok());
  auto latest = store_->LatestMetricsPerRank("j-1");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  ASSERT_EQ(latest->size(), 2u);
  EXPECT_EQ((*latest)[1].rank, 1);
  EXPECT_EQ((*latest)[1].attempt, 1);
  EXPECT_EQ((*latest)[1].step, 3);
  EXPECT_EQ((*latest)[1].samples_seen, 31);
  EXPECT_GT((*latest)[1].id, (*latest)[0].id);
  EXPECT_EQ((*latest)[1].eval_by_timestep,
            (std::vector<std::pair<int64_t, double>>{{100, 0.5}, {900, 0.125}}));

  CheckpointRecord ck;
  ck.job_id = "j-1";
  ck.attempt = 1;
  ck.step = 4;
  ck.path = "/x/step-000004";
  ck.size_bytes = 1234;
  ck.save_seconds = 2.5;
  ck.stall_seconds = 0.25;
  ck.created_at = 99;
  ASSERT_TRUE(store_->AddCheckpoint(ck).ok());
  auto checkpoints = store_->ListCheckpoints("j-1");
  ASSERT_TRUE(checkpoints.ok());
  ASSERT_EQ(checkpoints->size(), 1u);
  EXPECT_EQ((*checkpoints)[0].step, 4);
  EXPECT_EQ((*checkpoints)[0].attempt, 1);
  EXPECT_EQ((*checkpoints)[0].path, "/x/step-000004");
  EXPECT_EQ((*checkpoints)[0].size_bytes, 1234);
  EXPECT_EQ((*checkpoints)[0].save_seconds, 2.5);
  EXPECT_EQ((*checkpoints)[0].stall_seconds, 0.25);
  EXPECT_EQ((*checkpoints)[0].created_at, 99);
  ASSERT_TRUE(store_->SetCheckpointPin("j-1", 4, true, "alice").ok());
  ASSERT_TRUE(store_->SetCheckpointPin("j-1", 2, true, "alice").ok());
  EXPECT_EQ(*store_->ListCheckpointPins("j-1"), (std::set<int64_t>{2, 4}));
  ASSERT_TRUE(store_->SetCheckpointPin("j-1", 2, false, "alice").ok());
  EXPECT_EQ(*store_->ListCheckpointPins("j-1"), (std::set<int64_t>{4}));

  EXPECT_EQ(*store_->LastRankError("j-1", 1, 1), "");
  for (const char* message : {"rank 1: out of memory", "rank 1: NCCL timeout", "rank 0: other"}) {
    EventRecord e;
    e.job_id = "j-1";
    e.attempt = 1;
    e.kind = "worker";
    e.level = "error";
    e.message = message;
    ASSERT_TRUE(store_->AddEvent(e).ok());
  }
  EXPECT_EQ(*store_->LastRankError("j-1", 1, 1), "NCCL timeout");
  EXPECT_EQ(*store_->LastRankError("j-1", 2, 1), "");
}

}  // namespace
}  // namespace adctl
