// WorkerService over a real gRPC socket, driven by the real CoordinatorClient (the library
// adworker links): registration, token check, rendezvous KV scoped to the attempt, metrics and
// checkpoints landing in the store, RUNNING on training start, and the stop flag on pause.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/job_layout.h"
#include "common/worker_contract.h"
#include "server/grpc/job_service.h"
#include "server/grpc/worker_service.h"
#include "server/supervisor/supervisor.h"
#include "tests/testing/temp_store.h"
#include "worker/report/coordinator_client.h"

namespace adctl {
namespace {

class WorkerApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenTestStore(tmp_);
    SupervisorOptions o;
    o.data_dir = dir_;
    o.worker_binary = ADCTL_FAKE_WORKER;
    o.devices = CpuSlots(2);
    o.tick_ms = 20;
    o.heartbeat_interval_ms = 100;
    o.metrics_max_points = kMaxPoints;
    supervisor_ = std::make_unique<Supervisor>(o, store_.get(), Launchers{&launcher_}, nullptr);
    service_ = std::make_unique<WorkerServiceImpl>(&supervisor_->workers());
    // As adctld wires it: what ranks left undelivered is taken when their attempt ends.
    supervisor_->monitor().SetAttemptEndedHook(
        [this](const JobRecord& job, int attempt, int world_size) {
          service_->DeliverPendingReports(job.job_dir, job.id, attempt, world_size);
        });
    ASSERT_TRUE(supervisor_->Start().ok());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_GT(port_, 0);
    // A running attempt whose ranks (the fake worker) just sleep; the test plays rank 0.
    SubmitRequest r;
    r.spec_yaml = "name: sleep\nmodel: {preset: tiny}\nresources: {gpus: 1, grace_seconds: 1}\n";
    job_ = supervisor_->jobs().Submit(r)->first;
    for (int i = 0; i < 200 && store_->GetJob(job_.id)->attempt == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    job_ = store_->GetJob(job_.id).value();
    ASSERT_EQ(job_.attempt, 1);
    // The fake rank writes the token it was launched with; the store has only its hash.
    const std::string token_file = job_.job_dir + "/token-1-0";
    for (int i = 0; i < 500 && !std::filesystem::exists(token_file); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::ifstream in(token_file);
    ASSERT_TRUE(std::getline(in, token_)) << token_file;
    EXPECT_TRUE(job_.token.empty());  // no plaintext token in the store
    attempt_key_ = store_->GetAttempt(job_.id, 1)->token_sha256;
    ASSERT_EQ(attempt_key_.size(), 64u);
    EXPECT_EQ(token_, RankToken(attempt_key_, 0));  // rank 0's own token
  }
  void TearDown() override {
    supervisor_->jobs().Cancel(job_.id, std::nullopt, true);
    for (int i = 0; i < 200 && !IsTerminal(store_->GetJob(job_.id)->state); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    server_->Shutdown();
    supervisor_.reset();
  }
  std::string Address() const { return "127.0.0.1:" + std::to_string(port_); }

  // ReportMetrics as a rank calls it, with `n` points of steps from `first_step`.
  grpc::Status ReportPoints(int64_t first_step, int n) {
    auto stub = v1::WorkerService::NewStub(
        grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    v1::ReportMetricsRequest req;
    req.mutable_ref()->set_job_id(job_.id);
    req.mutable_ref()->set_attempt(1);
    req.mutable_ref()->set_rank(0);
    for (int i = 0; i < n; ++i) {
      v1::MetricPoint* p = req.add_points();
      p->set_step(first_step + i);
      p->set_loss(0.5);
    }
    v1::ReportMetricsResponse resp;
    return stub->ReportMetrics(&ctx, req, &resp);
  }

  static constexpr int64_t kMaxPoints = 20000;  // --metrics-max-points

  TempDir tmp_;  // first: removed after everything that uses it
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
  LocalLauncher launcher_;
  std::unique_ptr<Supervisor> supervisor_;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  JobRecord job_;
  std::string token_;        // attempt 1's rank 0's
  std::string attempt_key_;  // what the store keeps of attempt 1's secret
};

TEST_F(WorkerApiTest, WrongTokenAttemptOrRankAndEndedAttemptsAreRefused) {
  auto bad =
      CoordinatorClient::Connect(Address(), job_.id, 1, 0, 1, "wrong", std::chrono::seconds(2));
  EXPECT_EQ(bad.status().code(), StatusCode::kPermissionDenied) << bad.status().ToString();
  // The token is its attempt's and its ranks' only.
  auto other_attempt =
      CoordinatorClient::Connect(Address(), job_.id, 7, 0, 1, token_, std::chrono::seconds(2));
  EXPECT_EQ(other_attempt.status().code(), StatusCode::kPermissionDenied);
  auto no_such_rank =
      CoordinatorClient::Connect(Address(), job_.id, 1, 5, 6, token_, std::chrono::seconds(2));
  EXPECT_EQ(no_such_rank.status().code(), StatusCode::kPermissionDenied)
      << no_such_rank.status().ToString();
  // A rank's token is bound to its rank: another rank's token, or the stored key itself, is
  // refused for rank 0.
  for (const std::string& other : {RankToken(attempt_key_, 1), attempt_key_}) {
    auto as_rank0 =
        CoordinatorClient::Connect(Address(), job_.id, 1, 0, 1, other, std::chrono::seconds(2));
    EXPECT_EQ(as_rank0.status().code(), StatusCode::kPermissionDenied)
        << as_rank0.status().ToString();
    EXPECT_NE(as_rank0.status().message().find("rank 0: wrong or missing token"), std::string::npos)
        << as_rank0.status().message();
  }
  // Once the attempt has ended its token opens nothing.
  ASSERT_TRUE(supervisor_->jobs().Cancel(job_.id, std::nullopt, true).ok());
  for (int i = 0; i < 300 && !IsTerminal(store_->GetJob(job_.id)->state); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto ended =
      CoordinatorClient::Connect(Address(), job_.id, 1, 0, 1, token_, std::chrono::seconds(2));
  EXPECT_EQ(ended.status().code(), StatusCode::kFailedPrecondition) << ended.status().ToString();
  auto unknown =
      CoordinatorClient::Connect(Address(), "j-nope", 1, 0, 1, token_, std::chrono::seconds(2));
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
}

TEST_F(WorkerApiTest, ReportsTheDatabaseCannotTakeAreKeptAndDeliveredLater) {
  auto client = CoordinatorClient::Connect(Address(), job_.id, 1, 0, 1, token_);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto& c = *client.value();
  // The database cannot write (as on a full disk): the rank keeps its steps.
  ASSERT_TRUE(store_->SetWritesFail(true).ok());
  for (int step = 1; step <= 3; ++step) {
    StepReport s;
    s.step = step;
    s.total_steps = 6;
    s.loss = 1.0 / step;
    c.OnStep(s);
  }
  EXPECT_FALSE(c.Flush(std::chrono::milliseconds(1500)));
  ASSERT_TRUE(store_->SetWritesFail(false).ok());
  // Once it can, every point arrives; none was dropped.
  ASSERT_TRUE(c.Flush(std::chrono::seconds(10)));
  EXPECT_EQ(store_->ListMetrics(job_.id, 0)->size(), 3u);

  // More than the rank can hold while the database is down: the oldest are dropped, and the
  // job's events say how many once adctld takes reports again.
  ASSERT_TRUE(store_->SetWritesFail(true).ok());
  for (int step = 4; step <= 10000 + 10; ++step) {
    StepReport s;
    s.step = step;
    s.total_steps = 20000;
    c.OnStep(s);
  }
  EXPECT_FALSE(c.Flush(std::chrono::milliseconds(500)));
  ASSERT_TRUE(store_->SetWritesFail(false).ok());
  ASSERT_TRUE(c.Flush(std::chrono::seconds(20)));
  EXPECT_EQ(store_->ListMetrics(job_.id, 0)->size(), 3u + 10000u);
  bool said = false;
  for (const EventRecord& e : store_->ListEvents(job_.id, 0, 0).value()) {
    said |=
        e.message.find("7 step metric point(s) and 0 event(s) were dropped") != std::string::npos;
  }
  EXPECT_TRUE(said);
}

// What a rank cannot deliver is also kept in its job folder; when its attempt ends (here a rank
// killed, as after an adctld outage, with its file left behind) adctld takes it from there.
TEST_F(WorkerApiTest, WhatARankCouldNotSendIsKeptOnDiskAndTakenWhenItsAttemptEnds) {
  const std::string spill = JobLayout(job_.job_dir).rank_pending_reports(1, 0);
  {
    auto client = CoordinatorClient::Connect(Address(), job_.id, 1, 0, 1, token_);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto& c = *client.value();
    c.SetSpillPath(spill);
    ASSERT_TRUE(store_->SetWritesFail(true).ok());
    for (int step = 1; step <= 3; ++step) {
      StepReport s;
      s.step = step;
      s.total_steps = 100;
      s.loss = 0.5;
      c.OnStep(s);
    }
    EXPECT_FALSE(c.Flush(std::chrono::milliseconds(1500)));
    v1::PendingReports kept;
    std::ifstream in(spill, std::ios::binary);
    ASSERT_TRUE(in) << spill;
    ASSERT_TRUE(kept.ParseFromIstream(&in));
    EXPECT_EQ(kept.points_size(), 3);
    EXPECT_EQ(kept.ref().rank(), 0);
    ASSERT_TRUE(store_->SetWritesFail(false).ok());
    ASSERT_TRUE(c.Flush(std::chrono::seconds(10)));
    EXPECT_FALSE(std::filesystem::exists(spill)) << "delivered: the file goes";
  }
  EXPECT_EQ(store_->ListMetrics(job_.id, 0)->size(), 3u);

  // A killed rank's file: steps 50-52 and an event it never sent.
  v1::PendingReports left;
  left.mutable_ref()->set_job_id(job_.id);
  left.mutable_ref()->set_attempt(1);
  left.mutable_ref()->set_rank(0);
  for (int step = 50; step <= 52; ++step) {
    v1::MetricPoint* p = left.add_points();
    p->set_step(step);
    p->set_loss(0.25);
  }
  v1::WorkerEvent* e = left.add_events();
  e->set_kind(v1::WorkerEvent::KIND_MESSAGE);
  e->set_level("warning");
  e->set_message("a warning left behind");
  {
    std::ofstream out(spill, std::ios::binary);
    ASSERT_TRUE(left.SerializeToOstream(&out));
  }
  ASSERT_TRUE(supervisor_->jobs().Cancel(job_.id, std::nullopt, true).ok());
  for (int i = 0; i < 500 && !IsTerminal(store_->GetJob(job_.id)->state); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto points = store_->ListMetrics(job_.id, 0).value();
  ASSERT_EQ(points.size(), 6u);
  EXPECT_EQ(points.back().step, 52);
  std::string said;
  for (const EventRecord& ev : store_->ListEvents(job_.id, 0, 0).value()) said += ev.message + "\n";
  EXPECT_NE(said.find("a warning left behind"), std::string::npos) << said;
  EXPECT_NE(said.find("rank 0 could not send 3 metric point(s) and 1 event(s) before it ended"),
            std::string::npos)
      << said;
  EXPECT_FALSE(std::filesystem::exists(spill));
}

TEST_F(WorkerApiTest, UnreachableCoordinatorIsUnavailable) {
  auto r = CoordinatorClient::Connect("127.0.0.1:1", job_.id, 1, 0, 1, token_,
                                      std::chrono::milliseconds(500));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
}

TEST_F(WorkerApiTest, ReportsReachTheStoreAndPauseSetsTheStopFlag) {
  auto client = CoordinatorClient::Connect(Address(), job_.id, 1, 0, 1, token_);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto& c = *client.value();

  // Rendezvous KV, with a reader waiting for a key set later.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(c.Set("nccl_id", std::string("\x01\x00\x02", 3)).ok());
  });
  auto got = c.Get("nccl_id", std::chrono::seconds(5));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got.value(), std::string("\x01\x00\x02", 3));
  auto missing = c.Get("never", std::chrono::milliseconds(300));
  EXPECT_EQ(missing.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(missing.status().message().find("never"), std::string::npos);

  c.OnTrainingStarted(0, 6);
  for (int step = 1; step <= 3; ++step) {
    StepReport s;
    s.step = step;
    s.total_steps = 6;
    s.loss = 1.0 / step;
    s.step_seconds = 0.1;
    c.OnStep(s);
  }
  // A checkpoint outside the job's folder is refused; its own is recorded.
  CheckpointReport ck;
  ck.step = 1;
  ck.path = dir_ + "/elsewhere/step-00000001";
  c.OnCheckpoint(ck);
  ck.step = 2;
  ck.path = JobLayout(job_.job_dir).checkpoints(job_.checkpoint_dir) + "/step-00000002";
  c.OnCheckpoint(ck);
  ASSERT_TRUE(c.Flush(std::chrono::seconds(5)));
  JobRecord job = store_->GetJob(job_.id).value();
  EXPECT_EQ(job.state, JobState::kRunning);
  EXPECT_EQ(job.progress.step, 3);
  EXPECT_EQ(job.progress.last_checkpoint_step, 2);
  EXPECT_EQ(store_->ListMetrics(job_.id, 0)->size(), 3u);
  EXPECT_EQ(store_->ListCheckpoints(job_.id)->size(), 1u);
  bool refused = false;
  for (const EventRecord& e : store_->ListEvents(job_.id, 0, 0).value()) {
    refused |= e.message.find("checkpoint report refused") != std::string::npos &&
               e.message.find("elsewhere") != std::string::npos;
  }
  EXPECT_TRUE(refused);
  auto ranks = store_->ListRanks(job_.id, 1).value();
  EXPECT_EQ(ranks[0].worker_pid, static_cast<int>(getpid()));

  EXPECT_FALSE(c.StopRequested());
  ASSERT_TRUE(supervisor_->jobs().Pause(job_.id, std::nullopt).ok());
  for (int i = 0; i < 100 && !c.StopRequested(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(c.StopRequested());
}

}  // namespace
}  // namespace adctl

namespace adctl {
namespace {

// One call carries at most kMaxPointsPerReport points, and a flood of calls cannot outrun the
// history bound (--metrics-max-points): the store stays within it plus what arrives between
// two thinnings, whatever the rank sends.
TEST_F(WorkerApiTest, ReportsAreBoundedAndAFloodStaysWithinTheHistoryBound) {
  grpc::Status big = ReportPoints(1, static_cast<int>(kMaxPointsPerReport) + 1);
  EXPECT_EQ(big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(big.error_message().find("at most 1000"), std::string::npos) << big.error_message();
  EXPECT_TRUE(store_->ListMetrics(job_.id, 0)->empty());

  const int calls = 120;
  for (int call = 0; call < calls; ++call) {
    grpc::Status st = ReportPoints(1 + call * 1000, 1000);
    ASSERT_TRUE(st.ok()) << st.error_message();
    if (call % 10 == 9) {
      const size_t kept = store_->ListMetrics(job_.id, 0)->size();
      EXPECT_LE(kept, static_cast<size_t>(2 * kMaxPoints + 1000)) << "after call " << call;
    }
  }
  // The newest steps keep full resolution; the first point stays.
  auto points = store_->ListMetrics(job_.id, 0).value();
  ASSERT_FALSE(points.empty());
  EXPECT_EQ(points.front().step, 1);
  EXPECT_EQ(points.back().step, calls * 1000);
}

}  // namespace
}  // namespace adctl
