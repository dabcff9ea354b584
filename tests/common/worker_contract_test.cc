#include "common/worker_contract.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

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
  EXPECT_EQ(ClassifyExitCode(kExitStorageError), ExitClass::kFatal);
  EXPECT_EQ(ClassifyExitCode(kExitNotFinite), ExitClass::kFatal) << "a retry meets the same NaN";
  EXPECT_EQ(ClassifyExitCode(kExitCrash), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExitCode(kExitTransient), ExitClass::kRetryable);
  EXPECT_EQ(ClassifyExitCode(42), ExitClass::kRetryable);  // unknown
  EXPECT_EQ(DescribeExitCode(42), "");
}

// The exit-code tables users read (README.md, docs/worker-contract.md) list every code of the
// code's table.
TEST(WorkerContractTest, TheDocumentedTablesListEveryCode) {
  for (const char* doc : {"README.md", "docs/worker-contract.md"}) {
    std::ifstream in(std::string(ADCTL_REPO_ROOT) + "/" + doc);
    ASSERT_TRUE(in) << doc;
    std::stringstream text;
    text << in.rdbuf();
    for (const ExitCodeInfo& info : WorkerExitCodes()) {
      if (info.code == kExitNotExecuted) continue;  // adctld's own reading of a failed exec
      EXPECT_NE(text.str().find("\n| " + std::to_string(info.code) + " | "), std::string::npos)
          << doc << " lacks exit code " << info.code << " (" << info.description << ")";
    }
  }
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

// What srun sets for task 3 of 4, two per node.
const char* SlurmTaskEnv(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

TEST(WorkerContractTest, RanksFromSlurmReadTheTaskEnvironment) {
  const std::map<std::string, std::string> env = {{"SLURM_PROCID", "3"},
                                                  {"SLURM_NTASKS", "4"},
                                                  {"SLURM_LOCALID", "1"},
                                                  {"SLURM_NTASKS_PER_NODE", "2"}};
  auto getenv = [&](const char* name) { return SlurmTaskEnv(env, name); };
  WorkerAssignment a;
  a.spec_path = "/data/jobs/j1/spec.yaml";
  a.job_id = "j1";
  a.attempt = 2;
  a.ranks_from = kRanksFromSlurm;
  a.coordinator = "10.0.0.1:5000";
  const std::vector<std::string> argv = a.ToArgv();
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--rank"), 0);
  auto parsed = WorkerAssignment::FromArgs(argv, getenv);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->rank, 3);
  EXPECT_EQ(parsed->world_size, 4);
  EXPECT_EQ(parsed->local_rank, 1);
  EXPECT_EQ(parsed->local_world_size, 2);
  EXPECT_EQ(parsed->ranks_from, "slurm");
  EXPECT_EQ(parsed->coordinator, "10.0.0.1:5000");

  // Without SLURM_NTASKS_PER_NODE: tasks / nodes.
  auto no_per_node = env;
  no_per_node.erase("SLURM_NTASKS_PER_NODE");
  no_per_node["SLURM_NNODES"] = "2";
  auto from_nodes = WorkerAssignment::FromArgs(
      argv, [&](const char* name) { return SlurmTaskEnv(no_per_node, name); });
  ASSERT_TRUE(from_nodes.ok()) << from_nodes.status().ToString();
  EXPECT_EQ(from_nodes->local_world_size, 2);
}

TEST(WorkerContractTest, RanksFromSlurmErrorsNameWhatIsWrong) {
  const std::map<std::string, std::string> none;
  auto empty = [&](const char* name) { return SlurmTaskEnv(none, name); };
  auto st = WorkerAssignment::FromArgs({"--spec", "s", "--ranks-from", "slurm"}, empty).status();
  EXPECT_NE(st.message().find("SLURM_PROCID is not set"), std::string::npos) << st.ToString();
  st = WorkerAssignment::FromArgs({"--spec", "s", "--ranks-from", "pbs"}, empty).status();
  EXPECT_NE(st.message().find("unknown source 'pbs'"), std::string::npos) << st.ToString();
  const std::map<std::string, std::string> env = {
      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}};
  st = WorkerAssignment::FromArgs({"--spec", "s", "--ranks-from", "slurm", "--rank", "0"},
                                  [&](const char* name) { return SlurmTaskEnv(env, name); })
           .status();
  EXPECT_NE(st.message().find("exclude each other"), std::string::npos) << st.ToString();
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
