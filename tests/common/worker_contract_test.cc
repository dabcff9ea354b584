#include "common/worker_contract.h"

#include <gtest/gtest.h>

#include <set>

#include "common/job_layout.h"

namespace adctl {
namespace {

TEST(WorkerContractTest, EveryDocumentedCodeHasOneClassAndADescription) {
  std::set<int> seen;
  for (const ExitCodeInfo& info : WorkerExitCodes()) {
    EXPECT_TRUE(seen.insert(info.code).second) << "code " << info.code << " listed twice";
    EXPECT_EQ(ClassifyExitCode(info.code), info.exit_class);
    EXPECT_EQ(DescribeExitCode(info.code), info.description);
    EXPECT_FALSE(std::string(info.description).empty());
  }
  EXPECT_EQ(ClassifyExitCode(kExitOk), ExitClass::kSuccess);
  EXPECT_EQ(ClassifyExitCode(kExitStopped), ExitClass::kStopped);
  EXPECT_EQ(ClassifyExitCode(kExitBadSpec), ExitClass::kFatal);
  EXPECT_EQ(ClassifyExitCode(kExitDataError), ExitClass::kFatal);
  EXPECT_EQ(ClassifyExitCode(kExitModelError), ExitClass::kFatal);
  EXPECT_EQ(ClassifyExitCode(kExitCrash), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExitCode(kExitTransient), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExitCode(42), ExitClass::kRetryable);  // unknown
  EXPECT_EQ(DescribeExitCode(42), "");
}

TEST(WorkerContractTest, AssignmentRoundTripsThroughArgv) {
  WorkerAssignment a;
  a.spec_path = "/data/jobs/j1/spec.yaml";
  a.job_dir = "/data/jobs/j1";
  a.job_id = "j1";
  a.attempt = 3;
  a.rank = 1;
  a.world_size = 4;
  a.local_rank = 1;
  a.local_world_size = 2;
  a.coordinator = "127.0.0.1:5000";
  auto back = WorkerAssignment::FromArgs(a.ToArgv());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, a);
}

TEST(WorkerContractTest, StandaloneDefaultsComeFromTheSpecPath) {
  auto a = WorkerAssignment::FromArgs({"--spec", "/tmp/run/job.yaml"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->job_dir, "/tmp/run");
  EXPECT_EQ(a->job_id, "local");
  EXPECT_EQ(a->rank, 0);
  EXPECT_EQ(a->world_size, 1);
  EXPECT_EQ(a->local_rank, 0);
  EXPECT_EQ(a->local_world_size, 1);
  EXPECT_EQ(a->coordinator, "");
  // The standalone form survives a round trip too.
  auto back = WorkerAssignment::FromArgs(a->ToArgv());
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *a);
}

TEST(WorkerContractTest, BadArgumentsAreErrors) {
  EXPECT_FALSE(WorkerAssignment::FromArgs({}).ok());                              // no --spec
  EXPECT_FALSE(WorkerAssignment::FromArgs({"--spec", "s", "--rank", "2"}).ok());  // 2 >= 1
  EXPECT_FALSE(WorkerAssignment::FromArgs({"--spec", "s", "--rank", "x"}).ok());
  EXPECT_FALSE(WorkerAssignment::FromArgs({"--spec", "s", "--bogus", "1"}).ok());
  EXPECT_FALSE(WorkerAssignment::FromArgs({"--spec"}).ok());
  auto st = WorkerAssignment::FromArgs({"--spec", "s", "--world-size", "0"}).status();
  EXPECT_NE(st.message().find("world size"), std::string::npos) << st.ToString();
}

TEST(JobLayoutTest, NamesEveryFileUnderTheJobDirectory) {
  JobLayout l("/d/jobs/j");
  EXPECT_EQ(l.spec(), "/d/jobs/j/spec.yaml");
  EXPECT_EQ(l.rank_log(2, 1), "/d/jobs/j/logs/attempt-2/rank-1.log");
  EXPECT_EQ(l.rank_exit(2, 1), "/d/jobs/j/logs/attempt-2/rank-1.exit");
  EXPECT_EQ(l.attempt_logs(3), "/d/jobs/j/logs/attempt-3");
  EXPECT_EQ(l.checkpoints(), "/d/jobs/j/checkpoints");
  EXPECT_EQ(l.checkpoints("/elsewhere"), "/elsewhere");
  EXPECT_EQ(l.rendezvous(4), "/d/jobs/j/rendezvous/attempt-4");
  EXPECT_EQ(l.preset_unet2d(), "/d/jobs/j/model/unet2d");
}

}  // namespace
}  // namespace adctl
