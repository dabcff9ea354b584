// adctld's /metrics on prometheus-cpp: the names, labels and types README.md lists, the series of
// a finished job dropped after the retention, and the text format Prometheus parses.
#include "server/metrics/job_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string_view>
#include <type_traits>

#include "tests/testing/temp_store.h"

namespace adctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class JobMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenTestStore(tmp_);
    JobRecord j;
    j.id = "j-1";
    j.name = "tiny";
    // A MotionLoRA job: adctl_job_info says so, with its rank.
    j.spec_yaml = "name: tiny\nmodel: {unet_motion: /m/unet_motion, lora: {rank: 8}}\n";
    j.token = "t";
    j.job_dir = dir_ + "/jobs/j-1";
    j.gpus = 2;
    j.submitted_at = NowSeconds();
    ASSERT_TRUE(store_->InsertJob(j).ok());
    // A preprocess job (videos → latent cache).
    j.id = "j-2";
    j.name = "cache";
    j.spec_yaml =
        "name: cache\nkind: preprocess\nmodel: {pretrained: /m/sd}\n"
        "data: {kind: video, csv: /d/v.csv, video_dir: /d}\n"
        "preprocess: {output: /c}\n";
    j.job_dir = dir_ + "/jobs/j-2";
    ASSERT_TRUE(store_->InsertJob(j).ok());
  }

  static MetricRecord Point(int rank, int64_t step) {
    MetricRecord m;
    m.job_id = "j-1";
    m.attempt = 1;
    m.rank = rank;
    m.step = step;
    m.total_steps = 10;
    m.loss = 0.25;
    m.learning_rate = 1e-4;
    m.step_seconds = 0.3;
    m.data_wait_seconds = 0.01;
    m.allreduce_exposed_seconds = 0.002;
    m.clips_per_second = 26.5;
    m.peak_memory_bytes = 1 << 20;
    return m;
  }

  TempDir tmp_;  // first: removed after everything that uses it
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
};

TEST_F(JobMetricsTest, ExportsEveryListedSeriesWithItsLabels) {
  JobMetrics metrics(store_.get());
  metrics.OnMetrics({Point(0, 1), Point(1, 1), Point(0, 2), Point(1, 2)});
  // The preprocess job's ranks: shards, clips and skips, rank 0's videos/s.
  MetricRecord shard = Point(1, 3);
  shard.job_id = "j-2";
  shard.total_steps = 4;
  shard.samples_seen = 5;
  shard.videos_skipped_missing = 2;
  shard.videos_skipped_truncated = 1;
  MetricRecord shard0 = shard;
  shard0.rank = 0;
  shard0.step = 2;
  shard0.samples_seen = 4;
  shard0.videos_skipped_missing = 0;
  shard0.videos_skipped_truncated = 0;
  shard0.clips_per_second = 3.5;
  metrics.OnMetrics({shard, shard0});
  CheckpointRecord c;
  c.job_id = "j-1";
  c.step = 2;
  c.size_bytes = 4096;
  c.created_at = 1700000000;
  metrics.OnCheckpoint(c);
  metrics.OnRestart("j-1");
  const std::string text = metrics.Scrape();
  for (const char* line : {
           "# TYPE adctl_jobs gauge",
           "adctl_jobs{state=\"QUEUED\"} 2",
           "adctl_jobs{state=\"RUNNING\"} 0",
           "adctl_train_loss{job_id=\"j-1\"} 0.25",
           "adctl_train_learning_rate{job_id=\"j-1\"} 0.0001",
           "adctl_train_global_step{job_id=\"j-1\"} 2",
           "adctl_train_total_steps{job_id=\"j-1\"} 10",
           "adctl_train_clips_per_second{job_id=\"j-1\"} 26.5",
           "# TYPE adctl_train_step_duration_seconds histogram",
           "adctl_train_step_duration_seconds_count{job_id=\"j-1\"} 2",
           "adctl_train_step_duration_seconds_bucket{job_id=\"j-1\",le=\"0.32\"} 2",
           "adctl_train_step_duration_seconds_bucket{job_id=\"j-1\",le=\"0.16\"} 0",
           "# TYPE adctl_train_data_wait_seconds_total counter",
           "adctl_train_data_wait_seconds_total{job_id=\"j-1\",rank=\"1\"} 0.02",
           "adctl_train_allreduce_exposed_seconds_total{job_id=\"j-1\",rank=\"0\"} 0.004",
           "adctl_train_peak_memory_bytes{job_id=\"j-1\",rank=\"1\"} 1048576",
           "adctl_checkpoint_last_success_timestamp_seconds{job_id=\"j-1\"} 1700000000",
           "adctl_checkpoint_size_bytes{job_id=\"j-1\"} 4096",
           "adctl_job_restarts_total{job_id=\"j-1\"} 1",
           "adctl_job_info{job_id=\"j-1\",lora_rank=\"8\",name=\"tiny\",trains=\"lora\"} 1",
           "adctl_preprocess_videos_skipped{job_id=\"j-2\",rank=\"1\",reason=\"missing\"} 2",
           "adctl_preprocess_videos_skipped{job_id=\"j-2\",rank=\"1\",reason=\"truncated\"} 1",
           "adctl_preprocess_videos_skipped{job_id=\"j-2\",rank=\"1\",reason=\"too_short\"} 0",
           "adctl_preprocess_videos_skipped{job_id=\"j-2\",rank=\"0\",reason=\"missing\"} 0",
           "adctl_preprocess_shards_written{job_id=\"j-2\",rank=\"1\"} 3",
           "adctl_preprocess_shards{job_id=\"j-2\",rank=\"0\"} 4",
           "adctl_preprocess_clips_written{job_id=\"j-2\",rank=\"1\"} 5",
           "adctl_preprocess_clips_written{job_id=\"j-2\",rank=\"0\"} 4",
           "adctl_preprocess_videos_per_second{job_id=\"j-2\"} 3.5",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  // A training job has no preprocess series; a preprocess job no training ones.
  EXPECT_THAT(text, Not(HasSubstr("adctl_preprocess_videos_skipped{job_id=\"j-1\"")));
  for (const char* family :
       {"adctl_train_loss", "adctl_train_global_step", "adctl_train_clips_per_second",
        "adctl_train_data_wait_seconds_total", "adctl_train_step_duration_seconds_count",
        "adctl_train_peak_memory_bytes"}) {
    EXPECT_THAT(text, Not(HasSubstr(std::string(family) + "{job_id=\"j-2\""))) << family;
  }
  // Only rank 0 feeds the job-level series.
  EXPECT_EQ(text.find("adctl_train_loss{job_id=\"j-1\",rank"), std::string::npos);

  // Prometheus' own linter parses and accepts the exposition (scripts/install-deps installs it).
  const std::string file = dir_ + "/metrics.prom", said = dir_ + "/promtool.out";
  std::ofstream(file) << text;
  const std::string command =
      std::string(ADCTL_PROMTOOL) + " check metrics < '" + file + "' > '" + said + "' 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream in(said);
  const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << output;
}

// Every row of kPrometheusSeries (common/metric_values.h) becomes its family, from the value it
// names, with its kind's type and labels: a new plain series needs no edit here.
TEST_F(JobMetricsTest, EveryRowOfTheSeriesTableIsExportedAsItsKindSays) {
  // Row i's value: 100 (i + 1) on rank 0, one more on rank 1; the other values are Point's.
  const auto with_rows = [](MetricRecord m, int64_t base) {
    for (size_t i = 0; i < std::size(kPrometheusSeries); ++i) {
      bool named = false;
      ForEachMetricValue(m, [&](std::string_view name, auto& v) {
        if (name != kPrometheusSeries[i].value) return;
        v = static_cast<std::decay_t<decltype(v)>>(base + 100 * static_cast<int64_t>(i + 1));
        named = true;
      });
      EXPECT_TRUE(named) << kPrometheusSeries[i].value << " is not a ForEachMetricValue name";
    }
    return m;
  };
  const auto value = [](size_t i, int rank) { return 100 * static_cast<int64_t>(i + 1) + rank; };
  MetricRecord shard = with_rows(Point(0, 1), 0);  // a preprocess rank: no adctl_train_* series
  shard.job_id = "j-2";
  JobMetrics metrics(store_.get());
  // Twice: a gauge keeps the latest value, a counter adds them up.
  for (int times = 0; times < 2; ++times) {
    metrics.OnMetrics({with_rows(Point(0, 1), 0), with_rows(Point(1, 1), 1), shard});
  }
  const std::string text = metrics.Scrape();
  for (size_t i = 0; i < std::size(kPrometheusSeries); ++i) {
    const PrometheusSeries& row = kPrometheusSeries[i];
    const std::string family = row.family;
    const bool counter = row.kind == SeriesKind::kRankCounter;
    EXPECT_THAT(text, HasSubstr("# HELP " + family + " " + row.help + "\n"));
    EXPECT_THAT(text, HasSubstr("# TYPE " + family + (counter ? " counter\n" : " gauge\n")));
    if (row.kind == SeriesKind::kJobGauge) {
      // Rank 0's value, no rank label.
      EXPECT_THAT(text,
                  HasSubstr(family + "{job_id=\"j-1\"} " + std::to_string(value(i, 0)) + "\n"));
      EXPECT_THAT(text, Not(HasSubstr(family + "{job_id=\"j-1\",rank=")));
    } else {
      for (int rank : {0, 1}) {
        const int64_t v = counter ? 2 * value(i, rank) : value(i, rank);
        EXPECT_THAT(text, HasSubstr(family + "{job_id=\"j-1\",rank=\"" + std::to_string(rank) +
                                    "\"} " + std::to_string(v) + "\n"));
      }
    }
    EXPECT_THAT(text, Not(HasSubstr(family + "{job_id=\"j-2\"")));
  }

  // Every value 0: a positive-only row is not exported, the others are (a counter from 0).
  JobMetrics zeros(store_.get());
  MetricRecord zero0 = Point(0, 1), zero1 = Point(1, 1);
  for (MetricRecord* m : {&zero0, &zero1}) {
    for (const PrometheusSeries& row : kPrometheusSeries) {
      ForEachMetricValue(*m, [&](std::string_view name, auto& v) {
        if (name == row.value) v = 0;
      });
    }
  }
  zeros.OnMetrics({zero0, zero1});
  const std::string zero_text = zeros.Scrape();
  for (const PrometheusSeries& row : kPrometheusSeries) {
    const std::string series = std::string(row.family) + "{job_id=\"j-1\"" +
                               (row.kind == SeriesKind::kJobGauge ? "} 0\n" : ",rank=\"1\"} 0\n");
    if (row.positive_only) {
      EXPECT_THAT(zero_text, Not(HasSubstr(std::string(row.family) + "{job_id=\"j-1\"")));
    } else {
      EXPECT_THAT(zero_text, HasSubstr(series));
    }
  }
}

TEST_F(JobMetricsTest, ARankOnAnotherDeviceAfterARestartLeavesNoSeriesOfTheOldOne) {
  // Attempt 1 runs rank 0 on cpu0; attempt 2 (after a restart) on cpu2.
  TransitionChanges first;
  first.attempt = 1;
  first.devices = std::vector<std::string>{"cpu0", "cpu1"};
  ASSERT_TRUE(store_->Transition("j-1", JobState::kQueued, JobState::kStarting, "t", first).ok());
  ASSERT_TRUE(store_->Transition("j-1", JobState::kStarting, JobState::kRunning, "t").ok());
  ASSERT_TRUE(store_->Transition("j-1", JobState::kRunning, JobState::kRestarting, "t").ok());
  TransitionChanges second;
  second.attempt = 2;
  second.devices = std::vector<std::string>{"cpu2", "cpu3"};
  ASSERT_TRUE(
      store_->Transition("j-1", JobState::kRestarting, JobState::kStarting, "t", second).ok());
  JobMetrics metrics(store_.get(), /*retain_seconds=*/0);
  MetricRecord m = Point(0, 1);
  m.gpu_utilization = 0.5;
  m.gpu_memory_used_bytes = 100;
  metrics.OnMetrics({m});
  EXPECT_THAT(
      metrics.Scrape(),
      HasSubstr("adctl_rank_gpu_utilization_ratio{gpu=\"cpu0\",job_id=\"j-1\",rank=\"0\"} 0.5"));
  m.attempt = 2;
  m.step = 2;
  m.gpu_utilization = 0.75;
  metrics.OnMetrics({m});
  std::string text = metrics.Scrape();
  EXPECT_THAT(
      text,
      HasSubstr("adctl_rank_gpu_utilization_ratio{gpu=\"cpu2\",job_id=\"j-1\",rank=\"0\"} 0.75"));
  EXPECT_THAT(text, HasSubstr("adctl_rank_gpu_info{gpu=\"cpu2\",job_id=\"j-1\""));
  EXPECT_THAT(text, Not(HasSubstr("gpu=\"cpu0\""))) << text;
  // The job's end drops everything, the moved series included, and nothing else.
  metrics.OnJobFinished("j-1", JobState::kSucceeded);
  text = metrics.Scrape();
  EXPECT_THAT(text, Not(HasSubstr("j-1")));
  EXPECT_EQ(metrics.SeriesOf("j-1"), 0u);
}

TEST_F(JobMetricsTest, AFinishedJobsSeriesAreDroppedAfterTheRetention) {
  JobMetrics metrics(store_.get(), /*retain_seconds=*/0);
  metrics.OnMetrics({Point(0, 1), Point(1, 1)});
  metrics.OnRestart("j-1");
  // Per row of kPrometheusSeries, one series per rank (rank 0's alone for a job gauge) with a
  // value to export, + step time and restarts; the info series comes with the scrape.
  size_t series = 2;
  for (const PrometheusSeries& row : kPrometheusSeries) {
    for (int rank : {0, 1}) {
      if (row.kind == SeriesKind::kJobGauge && rank != 0) continue;
      if (!row.positive_only || MetricValueByName(Point(rank, 1), row.value).value_or(0) > 0) {
        ++series;
      }
    }
  }
  EXPECT_EQ(metrics.SeriesOf("j-1"), series);
  EXPECT_THAT(metrics.Scrape(), HasSubstr("adctl_train_loss{job_id=\"j-1\"}"));
  metrics.OnJobFinished("j-1", JobState::kSucceeded);
  ASSERT_TRUE(store_->Transition("j-1", JobState::kQueued, JobState::kCancelled, "test").ok());
  const std::string text = metrics.Scrape();
  EXPECT_THAT(text, Not(HasSubstr("j-1")));
  EXPECT_EQ(metrics.SeriesOf("j-1"), 0u);
  EXPECT_THAT(text, HasSubstr("adctl_jobs{state=\"CANCELLED\"} 1"));
  // A late report of the ended job makes its series again; the next end drops them again.
  metrics.OnMetrics({Point(0, 2)});
  EXPECT_GT(metrics.SeriesOf("j-1"), 0u);
}

TEST_F(JobMetricsTest, AJobThatEndedBetweenTwoScrapesStillHasItsInfoSeries) {
  JobMetrics metrics(store_.get());
  metrics.OnMetrics({Point(0, 1)});
  ASSERT_TRUE(store_->Transition("j-1", JobState::kQueued, JobState::kCancelled, "test").ok());
  metrics.OnJobFinished("j-1", JobState::kCancelled);
  const std::string text = metrics.Scrape();
  EXPECT_THAT(
      text,
      HasSubstr("adctl_job_info{job_id=\"j-1\",lora_rank=\"8\",name=\"tiny\",trains=\"lora\"} 1"));
  EXPECT_THAT(text, HasSubstr("adctl_train_loss{job_id=\"j-1\"}"));
}

TEST_F(JobMetricsTest, RankAndNodeDeviceSeriesCarryWhatWasMeasuredAndNothingElse) {
  TransitionChanges c;
  c.attempt = 1;
  c.devices = std::vector<std::string>{"cpu0", "cpu1"};
  ASSERT_TRUE(store_->Transition("j-1", JobState::kQueued, JobState::kStarting, "go", c).ok());
  JobMetrics metrics(store_.get());
  std::vector<DeviceStatus> live;
  for (const Device& d : CpuSlots(3)) live.push_back({d, "", -1});
  live[0].job_id = live[1].job_id = "j-1";
  live[0].rank = 0;
  live[1].rank = 1;
  metrics.AttachDevices(CpuSlots(3), [&live] { return live; });

  // A CPU rank measures its CPU share and memory; power, temperature and clock stay unmeasured.
  MetricRecord cpu0 = Point(0, 1), cpu1 = Point(1, 1);
  cpu0.gpu_utilization = 0.75;
  cpu0.gpu_memory_used_bytes = 1000;
  cpu0.gpu_memory_total_bytes = 8000;
  cpu1.gpu_utilization = 0.5;
  metrics.OnMetrics({cpu0, cpu1});
  std::string text = metrics.Scrape();
  for (const char* line : {
           "adctl_rank_gpu_utilization_ratio{gpu=\"cpu0\",job_id=\"j-1\",rank=\"0\"} 0.75",
           "adctl_rank_gpu_memory_used_bytes{gpu=\"cpu0\",job_id=\"j-1\",rank=\"0\"} 1000",
           "adctl_rank_gpu_memory_total_bytes{gpu=\"cpu0\",job_id=\"j-1\",rank=\"0\"} 8000",
           "adctl_rank_gpu_utilization_ratio{gpu=\"cpu1\",job_id=\"j-1\",rank=\"1\"} 0.5",
           "adctl_rank_gpu_info{gpu=\"cpu1\",job_id=\"j-1\",model=\"",
           // Per node: every slot, busy or not, with its holder; a busy slot has its rank's
           // numbers.
           "adctl_gpu_info{gpu=\"cpu0\",job_id=\"j-1\",kind=\"cpu\"",
           "adctl_gpu_info{gpu=\"cpu2\",job_id=\"\",kind=\"cpu\"",
           "adctl_gpu_utilization_ratio{gpu=\"cpu0\"} 0.75",
           "adctl_gpu_utilization_ratio{gpu=\"cpu1\"} 0.5",
           "adctl_gpu_memory_used_bytes{gpu=\"cpu0\"} 1000",
       }) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  // Never a number that was not measured: no power, temperature or clock on CPU slots, no
  // memory for rank 1 (it sent none), nothing for the free slot.
  for (const char* absent : {"adctl_rank_gpu_power_watts{", "adctl_rank_gpu_temperature_celsius{",
                             "adctl_rank_gpu_sm_clock_hertz{", "adctl_gpu_power_watts{",
                             "adctl_rank_gpu_memory_used_bytes{gpu=\"cpu1\"",
                             "adctl_gpu_utilization_ratio{gpu=\"cpu2\"}"}) {
    EXPECT_THAT(text, Not(HasSubstr(absent)));
  }

  // The holder changes between scrapes: the node series follow it.
  live[0].job_id.clear();
  live[0].rank = -1;
  text = metrics.Scrape();
  EXPECT_THAT(text, HasSubstr("adctl_gpu_info{gpu=\"cpu0\",job_id=\"\",kind=\"cpu\""));
  EXPECT_THAT(text, Not(HasSubstr("adctl_gpu_utilization_ratio{gpu=\"cpu0\"}")));

  // The rank series are the job's: they go with its other series.
  JobMetrics short_lived(store_.get(), /*retain_seconds=*/0);
  short_lived.OnMetrics({cpu0});
  short_lived.OnJobFinished("j-1", JobState::kSucceeded);
  EXPECT_THAT(short_lived.Scrape(), Not(HasSubstr("adctl_rank_gpu_")));
}

}  // namespace
}  // namespace adctl
