// JobService over a real gRPC socket: the user token, error codes that name the bad field,
// paging, and the Status → gRPC mapping (one function, every code).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "adctl/v1/job_service.grpc.pb.h"
#include "proto/grpc_status.h"
#include "server/grpc/job_service.h"
#include "server/supervisor/supervisor.h"
#include "tests/testing/temp_store.h"

namespace adctl {
namespace {

TEST(StatusConvertTest, EveryCodeMapsAndRoundTrips) {
  const StatusCode codes[] = {StatusCode::kInvalidArgument,  StatusCode::kNotFound,
                              StatusCode::kAlreadyExists,    StatusCode::kFailedPrecondition,
                              StatusCode::kDataLoss,         StatusCode::kUnavailable,
                              StatusCode::kDeadlineExceeded, StatusCode::kPermissionDenied,
                              StatusCode::kCancelled,        StatusCode::kInternal};
  for (StatusCode code : codes) {
    grpc::Status g = ToGrpcStatus(Status(code, "field: why"));
    EXPECT_NE(g.error_code(), grpc::StatusCode::OK);
    EXPECT_NE(g.error_code(), grpc::StatusCode::UNKNOWN) << StatusCodeName(code);
    EXPECT_EQ(g.error_message(), "field: why");
    EXPECT_EQ(FromGrpcStatus(g).code(), code) << StatusCodeName(code);
  }
  EXPECT_TRUE(ToGrpcStatus(Status::Ok()).ok());
}

class JobApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenTestStore(tmp_);
    SupervisorOptions o;
    o.data_dir = dir_;
    o.worker_binary = "/bin/false";
    o.devices = CpuSlots(1);
    supervisor_ = std::make_unique<Supervisor>(o, store_.get(), Launchers{&launcher_}, nullptr);
    queries_ = std::make_unique<JobQueries>(store_.get(), supervisor_.get());
    exports_ = std::make_unique<MotionExports>(queries_.get(), &supervisor_->recorder());
    ASSERT_TRUE(access_.AddPlainToken("ci", Role::kAdmin, "s3cret-admin").ok());
    ASSERT_TRUE(access_.AddPlainToken("dashboard", Role::kViewer, "s3cret-viewer").ok());
    ASSERT_TRUE(access_.AddPlainToken("pipeline", Role::kSubmitter, "s3cret-submitter").ok());
    service_ = std::make_unique<JobServiceImpl>(&supervisor_->jobs(), queries_.get(),
                                                exports_.get(), &access_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::JobService::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                        grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }
  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = "s3cret-admin") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  TempDir tmp_;  // first: removed after everything that uses it
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
  LocalLauncher launcher_;
  std::unique_ptr<Supervisor> supervisor_;  // not started: jobs stay QUEUED
  std::unique_ptr<JobQueries> queries_;
  std::unique_ptr<MotionExports> exports_;
  AccessPolicy access_;
  std::unique_ptr<JobServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::JobService::Stub> stub_;
  int port_ = 0;
};

TEST_F(JobApiTest, EveryCallNeedsAKnownTokenOfARoleThatMayMakeIt) {
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  grpc::Status st = stub_->ListJobs(Ctx("").get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(st.error_message().find("no token"), std::string::npos) << st.error_message();
  st = stub_->ListJobs(Ctx("wrong-token").get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(st.error_message().find("wrong-token"), std::string::npos);  // never echoed
  EXPECT_TRUE(stub_->ListJobs(Ctx().get(), req, &resp).ok());

  // A viewer reads but cannot change anything; a submitter can.
  EXPECT_TRUE(stub_->ListJobs(Ctx("s3cret-viewer").get(), req, &resp).ok());
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  v1::SubmitJobResponse submitted;
  st = stub_->SubmitJob(Ctx("s3cret-viewer").get(), submit, &submitted);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("'dashboard' is a viewer; this needs submitter"),
            std::string::npos)
      << st.error_message();
  ASSERT_TRUE(stub_->SubmitJob(Ctx("s3cret-submitter").get(), submit, &submitted).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(submitted.job().id());
  v1::Job job;
  EXPECT_EQ(stub_->CancelJob(Ctx("s3cret-viewer").get(), cancel, &job).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::GetJobRequest get;
  get.set_job_id(submitted.job().id());
  ASSERT_TRUE(stub_->GetJob(Ctx("s3cret-viewer").get(), get, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_QUEUED);  // the viewer's cancel changed nothing
  EXPECT_TRUE(stub_->CancelJob(Ctx("s3cret-submitter").get(), cancel, &job).ok());
}

TEST(AccessPolicyTest, TokensFileHoldsHashesWithRolesAndErrorsNameTheEntry) {
  const TempDir tmp;
  const std::string dir = tmp.path(), path = dir + "/tokens.yaml";
  const auto write = [&path](const std::string& text) {
    FILE* f = fopen(path.c_str(), "w");
    fputs(text.c_str(), f);
    fclose(f);
  };
  write("tokens:\n  - {name: ci, role: submitter, sha256: " + TokenHash("ci-token-123") +
        "}\n  - {name: grafana, role: viewer, sha256: " + TokenHash("view-token-456") + "}\n");
  auto policy = AccessPolicy::FromFile(path);
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  EXPECT_TRUE(policy->Check("ci-token-123", Role::kSubmitter).allowed());
  EXPECT_EQ(policy->Check("ci-token-123", Role::kSubmitter).who, "ci");
  EXPECT_EQ(policy->Check("view-token-456", Role::kSubmitter).kind, AccessDecision::Kind::kDenied);
  EXPECT_EQ(policy->Check("ci-token-124", Role::kViewer).kind,
            AccessDecision::Kind::kUnauthenticated);
  EXPECT_EQ(policy->Check("", Role::kViewer).kind, AccessDecision::Kind::kUnauthenticated);
  // The file never holds a token: a plain token where the hash goes is refused.
  write("tokens:\n  - {name: ci, role: submitter, sha256: ci-token-123}\n");
  EXPECT_NE(AccessPolicy::FromFile(path).status().message().find("tokens[0].sha256: expected 64"),
            std::string::npos);
  write("tokens:\n  - {name: ci, role: root, sha256: " + TokenHash("x") + "}\n");
  EXPECT_NE(AccessPolicy::FromFile(path).status().message().find("tokens[0].role: must be one of"),
            std::string::npos)
      << AccessPolicy::FromFile(path).status().message();
  write("tokens: []\n");
  EXPECT_FALSE(AccessPolicy::FromFile(path).ok());
  EXPECT_EQ(AccessPolicy::FromFile(dir + "/none.yaml").status().code(), StatusCode::kNotFound);
  // No tokens at all: open (adctld then binds loopback only).
  EXPECT_TRUE(AccessPolicy().Check("", Role::kAdmin).allowed());
}

TEST_F(JobApiTest, ErrorsUseTheRightCodeAndNameTheField) {
  v1::SubmitJobRequest submit;
  v1::SubmitJobResponse submitted;
  grpc::Status st = stub_->SubmitJob(Ctx().get(), submit, &submitted);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("spec_yaml"), std::string::npos);
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\ntrain: {lr: 0}\n");
  st = stub_->SubmitJob(Ctx().get(), submit, &submitted);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("train.lr"), std::string::npos) << st.error_message();

  v1::GetJobRequest get;
  v1::Job job;
  EXPECT_EQ(stub_->GetJob(Ctx().get(), get, &job).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);  // job_id: required
  get.set_job_id("j-404");
  st = stub_->GetJob(Ctx().get(), get, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(), "job j-404: not found");

  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  ASSERT_TRUE(stub_->SubmitJob(Ctx().get(), submit, &submitted).ok());
  v1::ResumeJobRequest resume;
  resume.set_job_id(submitted.job().id());
  st = stub_->ResumeJob(Ctx().get(), resume, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("only PAUSED"), std::string::npos);
}

// A grace period is a number of seconds in [0, a day]: NaN, infinity and 1e300 are refused
// naming the field (they were taken, shown as -2147483648 s, and the ranks never killed).
TEST_F(JobApiTest, GracePeriodsOutsideADayAreRefused) {
  v1::SubmitJobRequest submit;
  v1::SubmitJobResponse submitted;
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  ASSERT_TRUE(stub_->SubmitJob(Ctx().get(), submit, &submitted).ok());
  for (double grace :
       {std::nan(""), std::numeric_limits<double>::infinity(), 1e300, -1.0, 86400.5}) {
    v1::CancelJobRequest cancel;
    cancel.set_job_id(submitted.job().id());
    cancel.set_grace_seconds(grace);
    v1::Job job;
    grpc::Status st = stub_->CancelJob(Ctx().get(), cancel, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << grace;
    EXPECT_NE(st.error_message().find("grace_seconds: must be"), std::string::npos)
        << st.error_message();
    v1::PauseJobRequest pause;
    pause.set_job_id(submitted.job().id());
    pause.set_grace_seconds(grace);
    st = stub_->PauseJob(Ctx().get(), pause, &job);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << grace;
  }
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\nresources: {grace_seconds: .nan}\n");
  grpc::Status st = stub_->SubmitJob(Ctx().get(), submit, &submitted);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("resources.grace_seconds"), std::string::npos)
      << st.error_message();
}

// Every command's event names the token that made it.
TEST_F(JobApiTest, CommandsEventsNameTheTokenThatMadeThem) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(stub_->SubmitJob(Ctx("s3cret-submitter").get(), submit, &submitted).ok());
  const std::string id = submitted.job().id();
  v1::Job job;
  v1::PauseJobRequest pause;
  pause.set_job_id(id);
  ASSERT_TRUE(stub_->PauseJob(Ctx("s3cret-admin").get(), pause, &job).ok());
  v1::ResumeJobRequest resume;
  resume.set_job_id(id);
  ASSERT_TRUE(stub_->ResumeJob(Ctx("s3cret-submitter").get(), resume, &job).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  ASSERT_TRUE(stub_->CancelJob(Ctx("s3cret-admin").get(), cancel, &job).ok());
  std::string said;
  for (const EventRecord& e : store_->ListEvents(id, 0, 0).value()) said += e.message + "\n";
  EXPECT_NE(said.find("submitted by pipeline:"), std::string::npos) << said;
  EXPECT_NE(said.find("paused by ci before it started"), std::string::npos) << said;
  EXPECT_NE(said.find("resumed by pipeline"), std::string::npos) << said;
  EXPECT_NE(said.find("cancelled by ci"), std::string::npos) << said;
}

// adctld --owner-only: a submitter commands only the jobs it submitted (the job records who),
// reads every job; an admin commands any.
TEST_F(JobApiTest, UnderOwnerOnlyASubmitterCommandsOnlyItsOwnJobs) {
  ASSERT_TRUE(access_.AddPlainToken("other-team", Role::kSubmitter, "s3cret-other").ok());
  access_.LimitSubmittersToTheirOwnJobs();
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  v1::SubmitJobResponse mine, theirs;
  ASSERT_TRUE(stub_->SubmitJob(Ctx("s3cret-submitter").get(), submit, &mine).ok());
  ASSERT_TRUE(stub_->SubmitJob(Ctx("s3cret-other").get(), submit, &theirs).ok());
  EXPECT_EQ(mine.job().submitted_by(), "pipeline");
  EXPECT_EQ(theirs.job().submitted_by(), "other-team");

  v1::Job job;
  v1::GetJobRequest get;
  get.set_job_id(theirs.job().id());
  ASSERT_TRUE(stub_->GetJob(Ctx("s3cret-submitter").get(), get, &job).ok());  // reading: any
  EXPECT_EQ(job.submitted_by(), "other-team");

  v1::CancelJobRequest cancel;
  cancel.set_job_id(theirs.job().id());
  grpc::Status refused = stub_->CancelJob(Ctx("s3cret-submitter").get(), cancel, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(refused.error_message(),
            "cancel: job " + theirs.job().id() +
                " was submitted by 'other-team'; token 'pipeline' may act only on its own jobs "
                "(adctld --owner-only; an admin may act on any)");
  v1::PauseJobRequest pause;
  pause.set_job_id(theirs.job().id());
  EXPECT_EQ(stub_->PauseJob(Ctx("s3cret-submitter").get(), pause, &job).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ExportMotionModulesRequest exp;
  exp.set_job_id(theirs.job().id());
  exp.set_format("diffusers");
  v1::ExportMotionModulesResponse exported;
  EXPECT_EQ(stub_->ExportMotionModules(Ctx("s3cret-submitter").get(), exp, &exported).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(store_->GetJob(theirs.job().id())->state, JobState::kQueued);  // untouched

  // Its own job, and an admin on anyone's.
  pause.set_job_id(mine.job().id());
  EXPECT_TRUE(stub_->PauseJob(Ctx("s3cret-submitter").get(), pause, &job).ok());
  EXPECT_TRUE(stub_->CancelJob(Ctx("s3cret-admin").get(), cancel, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(JobApiTest, ListPagesAndFiltersByState) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  v1::SubmitJobResponse submitted;
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(stub_->SubmitJob(Ctx().get(), submit, &submitted).ok());
    ids.push_back(submitted.job().id());
  }
  v1::CancelJobRequest cancel;
  cancel.set_job_id(ids[0]);
  v1::Job job;
  ASSERT_TRUE(stub_->CancelJob(Ctx().get(), cancel, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);

  v1::ListJobsRequest req;
  req.set_page_size(2);
  std::vector<std::string> seen;
  while (true) {
    v1::ListJobsResponse resp;
    ASSERT_TRUE(stub_->ListJobs(Ctx().get(), req, &resp).ok());
    for (const auto& j : resp.jobs()) seen.push_back(j.id());
    if (resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));

  v1::ListJobsRequest queued;
  queued.add_states(v1::JOB_STATE_QUEUED);
  v1::ListJobsResponse resp;
  ASSERT_TRUE(stub_->ListJobs(Ctx().get(), queued, &resp).ok());
  EXPECT_EQ(resp.jobs_size(), 4);
}

TEST_F(JobApiTest, WatchSendsTheJobFirstAndEndsAtItsTerminalState) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(stub_->SubmitJob(Ctx().get(), submit, &submitted).ok());
  v1::WatchJobRequest watch;
  watch.set_job_id(submitted.job().id());
  auto ctx = Ctx();
  auto reader = stub_->WatchJob(ctx.get(), watch);
  v1::JobUpdate u;
  ASSERT_TRUE(reader->Read(&u));
  // The snapshot comes before the job's events (its submit event exists already).
  ASSERT_TRUE(u.has_job()) << u.DebugString();
  EXPECT_EQ(u.job().state(), v1::JOB_STATE_QUEUED);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(submitted.job().id());
  v1::Job job;
  ASSERT_TRUE(stub_->CancelJob(Ctx().get(), cancel, &job).ok());
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  int events = 0;
  while (reader->Read(&u)) {
    if (u.has_job()) last = u.job().state();
    if (u.has_event()) ++events;
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(last, v1::JOB_STATE_CANCELLED);
  EXPECT_GE(events, 2);  // submitted, cancelled
}

TEST_F(JobApiTest, NegativeLimitsAreRejectedAndCheckpointsCarryTheirSaveTime) {
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml("name: t\nmodel: {preset: tiny}\n");
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(stub_->SubmitJob(Ctx().get(), submit, &submitted).ok());
  const std::string id = submitted.job().id();
  v1::ListEventsRequest events;
  events.set_job_id(id);
  events.set_limit(-1);
  v1::ListEventsResponse listed;
  grpc::Status st = stub_->ListEvents(Ctx().get(), events, &listed);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("limit"), std::string::npos) << st.error_message();
  v1::ListJobsRequest jobs;
  jobs.set_page_size(-5);
  v1::ListJobsResponse jobs_listed;
  EXPECT_EQ(stub_->ListJobs(Ctx().get(), jobs, &jobs_listed).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  TransitionChanges c;
  c.attempt = 1;
  ASSERT_TRUE(store_->Transition(id, JobState::kQueued, JobState::kStarting, "go", c).ok());
  CheckpointRecord ck;
  ck.job_id = id;
  ck.attempt = 1;
  ck.step = 4;
  ck.path = dir_ + "/nowhere/step-000004";
  ck.size_bytes = 1234;
  ck.save_seconds = 1.5;
  ck.stall_seconds = 0.25;
  ASSERT_TRUE(store_->AddCheckpoint(ck).ok());
  v1::ListCheckpointsRequest checkpoints;
  checkpoints.set_job_id(id);
  v1::ListCheckpointsResponse found;
  ASSERT_TRUE(stub_->ListCheckpoints(Ctx().get(), checkpoints, &found).ok());
  ASSERT_EQ(found.checkpoints_size(), 1);
  EXPECT_EQ(found.checkpoints(0).save_seconds(), 1.5);
  EXPECT_EQ(found.checkpoints(0).stall_seconds(), 0.25);
  EXPECT_FALSE(found.checkpoints(0).on_disk());
}

}  // namespace
}  // namespace adctl
