// The read side without a socket: a real Store and Supervisor (not started, so jobs stay
// QUEUED) on a temporary directory, with checkpoints and rank logs written where JobLayout says.
#include "server/api/job_queries.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/job_layout.h"
#include "server/api/convert.h"
#include "tests/testing/temp_store.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

class JobQueriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenTestStore(tmp_);
    SupervisorOptions o;
    o.data_dir = dir_;
    o.worker_binary = "/bin/false";
    o.devices = CpuSlots(2);
    supervisor_ = std::make_unique<Supervisor>(o, store_.get(), Launchers{&launcher_}, nullptr);
    queries_ = std::make_unique<JobQueries>(store_.get(), supervisor_.get());
    SubmitRequest r;
    r.spec_yaml = "name: q\nmodel: {preset: tiny}\nresources: {gpus: 2}\n";
    auto job = supervisor_->jobs().Submit(r);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    job_ = job->first;
  }
  void TearDown() override { supervisor_.reset(); }
  static void Write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  }

  TempDir tmp_;  // first: removed after everything that uses it
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
  LocalLauncher launcher_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<JobQueries> queries_;
  JobRecord job_;
};

TEST_F(JobQueriesTest, GetAndListJobs) {
  auto view = queries_->GetJob(job_.id, /*with_ranks=*/true);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->job.id, job_.id);
  EXPECT_EQ(view->job.state, JobState::kQueued);
  v1::Job proto;
  JobViewToProto(view.value(), &proto);
  EXPECT_EQ(proto.wait_reason(), view->wait_reason);

  auto jobs = queries_->ListJobs({JobState::kQueued}, 10);
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].job.id, job_.id);
  EXPECT_TRUE(queries_->ListJobs({JobState::kRunning}, 10)->empty());

  EXPECT_EQ(queries_->GetJob("nope", false).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(queries_->GetJob("", false).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(queries_->ListEvents("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(queries_->ListMetrics("nope").status().code(), StatusCode::kNotFound);
}

TEST_F(JobQueriesTest, CheckpointsMergeDiskAndStore) {
  const JobLayout layout(job_.job_dir);
  Write(layout.checkpoints() + "/step-00000004/manifest.json", "{}");
  CheckpointRecord reported;
  reported.job_id = job_.id;
  reported.step = 2;  // retention removed it from disk
  reported.attempt = 1;
  reported.path = layout.checkpoints() + "/step-00000002";
  reported.size_bytes = 10;
  ASSERT_TRUE(store_->AddCheckpoint(reported).ok());
  auto list = queries_->ListCheckpoints(job_.id);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].step, 2);
  EXPECT_FALSE((*list)[0].on_disk);
  EXPECT_EQ((*list)[0].attempt, 1);
  EXPECT_EQ((*list)[1].step, 4);
  EXPECT_TRUE((*list)[1].on_disk);
}

TEST_F(JobQueriesTest, SamplesSayWhetherTheirFilesAreThereAndArtifactsStayInTheJob) {
  const JobLayout layout(job_.job_dir);
  Write(layout.samples_step(3) + "/sample-0.mp4", "mp4");
  Write(layout.samples_step(3) + "/sample-0.gif", "GIF89a");
  SampleRecord r;
  r.job_id = job_.id;
  r.step = 3;
  r.prompt = "a cat";
  r.mp4 = "samples/step-00000003/sample-0.mp4";
  r.gif = "samples/step-00000003/sample-0.gif";
  SampleRecord gone = r;
  gone.index = 1;
  gone.mp4 = "samples/step-00000003/sample-1.mp4";
  gone.gif = "samples/step-00000003/sample-1.gif";
  ASSERT_TRUE(store_->AddSamples({r, gone}).ok());
  auto samples = queries_->ListSamples(job_.id);
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_TRUE((*samples)[0].on_disk);
  EXPECT_FALSE((*samples)[1].on_disk);
  EXPECT_EQ(queries_->ListSamples("nope").status().code(), StatusCode::kNotFound);

  auto gif = queries_->Artifact(job_.id, r.gif);
  ASSERT_TRUE(gif.ok()) << gif.status().ToString();
  EXPECT_EQ(gif->size_bytes, 6);
  EXPECT_EQ(gif->path, layout.samples_step(3) + "/sample-0.gif");
  EXPECT_EQ(queries_->Artifact(job_.id, gone.gif).status().code(), StatusCode::kNotFound);
  // Only files under samples/ and export/, named without tricks, and not through a symlink
  // that leads out of them.
  Write(layout.dir() + "/secret.txt", "s3cret");
  std::filesystem::create_symlink(layout.dir() + "/secret.txt",
                                  layout.samples_step(3) + "/link.gif");
  for (const std::string bad :
       {"spec.yaml", "samples/../spec.yaml", "/etc/passwd", "samples/step-00000003/./x",
        "samples/step-00000003/link.gif", "samples//x", "samples/step-00000003/"}) {
    auto refused = queries_->Artifact(job_.id, bad);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(refused.status().message().find("s3cret"), std::string::npos);
  }
}

TEST_F(JobQueriesTest, RankLogsAreReadFromTheLayoutsPathInChunks) {
  JobRecord job = job_;
  job.attempt = 1;
  EXPECT_TRUE(JobQueries::CheckRankLogRef(job, 1, 1).ok());
  EXPECT_EQ(JobQueries::CheckRankLogRef(job, 1, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(JobQueries::CheckRankLogRef(job, 2, 0).code(), StatusCode::kInvalidArgument);

  EXPECT_FALSE(queries_->ReadRankLog(job, 1, 1, 0, 100).exists);
  Write(JobLayout(job.job_dir).rank_log(1, 1), "hello world\n");
  EXPECT_EQ(queries_->RankLogPath(job, 1, 1), JobLayout(job.job_dir).rank_log(1, 1));
  LogRead first = queries_->ReadRankLog(job, 1, 1, 0, 5);
  EXPECT_TRUE(first.exists);
  EXPECT_EQ(first.size, 12);
  EXPECT_EQ(first.data, "hello");
  EXPECT_EQ(queries_->ReadRankLog(job, 1, 1, 5, 100).data, " world\n");
  EXPECT_EQ(queries_->ReadRankLog(job, 1, 1, 12, 100).data, "");
}

TEST_F(JobQueriesTest, WatchDeliversEachEventOnce) {
  auto cursor = queries_->StartWatch(job_.id, 0);
  ASSERT_TRUE(cursor.ok());
  auto first = queries_->Watch(job_.id, &cursor.value());
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->events.empty());  // "submitted"
  EXPECT_EQ(first->job.job.id, job_.id);
  auto second = queries_->Watch(job_.id, &cursor.value());
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->events.empty());
  ASSERT_TRUE(supervisor_->jobs().Cancel(job_.id, std::nullopt, false).ok());
  auto third = queries_->Watch(job_.id, &cursor.value());
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->events.empty());
  EXPECT_EQ(third->job.job.state, JobState::kCancelled);
}

TEST_F(JobQueriesTest, WaitForUpdatesAnswersAtTheTimeoutOrAsSoonAsTheJobChanges) {
  auto cursor = queries_->StartWatch(job_.id, 0);
  ASSERT_TRUE(cursor.ok());
  ASSERT_TRUE(queries_->Watch(job_.id, &cursor.value()).ok());  // past the "submitted" event
  auto start = std::chrono::steady_clock::now();
  auto quiet = queries_->WaitForUpdates(job_.id, &cursor.value(), 300);
  ASSERT_TRUE(quiet.ok());
  EXPECT_TRUE(quiet->events.empty());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(290));

  std::thread cancel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(supervisor_->jobs().Cancel(job_.id, std::nullopt, false).ok());
  });
  start = std::chrono::steady_clock::now();
  auto woken = queries_->WaitForUpdates(job_.id, &cursor.value(), 20000);
  cancel.join();
  ASSERT_TRUE(woken.ok());
  EXPECT_FALSE(woken->events.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(woken->job.job.state, JobState::kCancelled);
  EXPECT_EQ(queries_->WaitForUpdates("j-none", &cursor.value(), 10).status().code(),
            StatusCode::kNotFound);
}

TEST(DownsampleMetricsTest, EachRankKeepsItsFirstAndLastPointEvenlySpaced) {
  std::vector<MetricRecord> points;
  for (int step = 1; step <= 10; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      MetricRecord m;
      m.id = static_cast<int64_t>(points.size()) + 1;
      m.attempt = 1;
      m.rank = rank;
      m.step = step;
      points.push_back(m);
    }
  }
  auto steps_of = [](const std::vector<MetricRecord>& out, int rank) {
    std::vector<int64_t> steps;
    for (const MetricRecord& m : out) {
      if (m.rank == rank) steps.push_back(m.step);
    }
    return steps;
  };
  const auto four = DownsampleMetrics(points, 4);
  ASSERT_EQ(four.size(), 8u);
  EXPECT_EQ(steps_of(four, 0), (std::vector<int64_t>{1, 4, 7, 10}));
  EXPECT_EQ(steps_of(four, 1), (std::vector<int64_t>{1, 4, 7, 10}));
  for (size_t i = 1; i < four.size(); ++i) EXPECT_LT(four[i - 1].id, four[i].id);
  EXPECT_EQ(DownsampleMetrics(points, 20).size(), points.size());
  EXPECT_EQ(DownsampleMetrics(points, 0).size(), points.size());
  const auto last = DownsampleMetrics(points, 1);
  EXPECT_EQ(steps_of(last, 0), (std::vector<int64_t>{10}));
  EXPECT_EQ(steps_of(last, 1), (std::vector<int64_t>{10}));
  // Another attempt is its own series.
  MetricRecord resumed = points.back();
  resumed.id = 100;
  resumed.attempt = 2;
  points.push_back(resumed);
  EXPECT_EQ(DownsampleMetrics(points, 2).size(), 5u);
}

TEST_F(JobQueriesTest, DevicesConvertOnce) {
  auto devices = queries_->Devices();
  ASSERT_EQ(devices.size(), 2u);
  v1::Device proto;
  DeviceToProto(devices[0], &proto);
  EXPECT_EQ(proto.name(), devices[0].device.name);
  EXPECT_EQ(proto.kind(), "cpu");
}

TEST(ConvertTest, TheEtaIsComputedOnceForJobsAndMetricPoints) {
  EXPECT_DOUBLE_EQ(EtaSeconds(4, 10, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(EtaSeconds(10, 10, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(EtaSeconds(4, 10, 0.0), 0.0);
  MetricRecord m;
  m.step = 2;
  m.total_steps = 6;
  m.step_seconds = 1.5;
  v1::MetricPoint point;
  MetricToProto(m, &point);
  EXPECT_DOUBLE_EQ(point.eta_seconds(), 6.0);
  JobRecord job;
  job.state = JobState::kRunning;
  job.progress.step = 2;
  job.progress.total_steps = 6;
  job.progress.step_seconds = 1.5;
  v1::Job proto;
  JobToProto(job, "", &proto);
  EXPECT_DOUBLE_EQ(proto.progress().eta_seconds(), 6.0);
  job.state = JobState::kSucceeded;
  v1::Job done;
  JobToProto(job, "", &done);
  EXPECT_DOUBLE_EQ(done.progress().eta_seconds(), 0.0);
}

}  // namespace
}  // namespace adctl

namespace adctl {
namespace {

// A job's whole history is never one answer: reads are thinned to a default and capped, and a
// watch batch carries a bounded number of points, the rest following from its cursor.
TEST_F(JobQueriesTest, MetricReadsAndWatchBatchesAreBounded) {
  const int n = kMaxWatchBatchPoints + 1500;
  std::vector<MetricRecord> points(n);
  for (int i = 0; i < n; ++i) {
    points[i].job_id = job_.id;
    points[i].attempt = 1;
    points[i].step = i + 1;
    points[i].loss = 1.0;
  }
  ASSERT_TRUE(store_->AddMetrics(points).ok());

  auto read = queries_->ListMetrics(job_.id);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->size(), static_cast<size_t>(kDefaultMetricPointsPerRank));
  EXPECT_EQ(read->front().step, 1);
  EXPECT_EQ(read->back().step, n);
  EXPECT_EQ(queries_->ListMetrics(job_.id, 0, kMaxMetricPointsPerRank + 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(queries_->ListMetrics(job_.id, 0, 10)->size(), 10u);

  WatchCursor cursor;
  auto first = queries_->Watch(job_.id, &cursor);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->metrics.size(), static_cast<size_t>(kMaxWatchBatchPoints));
  auto second = queries_->Watch(job_.id, &cursor);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->metrics.size(), 1500u);
  EXPECT_EQ(second->metrics.back().step, n);
}

}  // namespace
}  // namespace adctl
