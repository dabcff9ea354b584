// The Slurm launcher's pure parts: the batch script and sbatch flags of an attempt (spec values
// over adctld's defaults, one srun task per rank under the rank shepherd, the token never in
// the script), and reading `scontrol show job`. tests/slurm/ runs them against a real Slurm.
#include "server/launcher/slurm_launcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace adctl {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

AttemptLaunch TwoNodeAttempt() {
  AttemptLaunch a;
  a.job_id = "j-abc123";
  a.attempt = 2;
  a.job_dir = "/shared/adctl/jobs/j-abc123";
  for (int r = 0; r < 4; ++r) {
    RankLaunch l;
    l.env = {{"ADCTL_TOKEN", "secret-token"}, {"PATH", "/usr/bin"}};
    l.exit_path = a.job_dir + "/logs/attempt-2/rank-" + std::to_string(r) + ".exit";
    a.ranks.push_back(l);
  }
  a.cluster_argv = {"/opt/adctl/adworker", "train", "--spec",        a.job_dir + "/spec.yaml",
                    "--ranks-from",        "slurm", "--coordinator", "10.0.0.1:50051"};
  a.cluster.nodes = 2;
  a.cluster.tasks_per_node = 2;
  a.cluster.gpus = true;
  a.cluster.partition = "h200";
  a.cluster.grace_seconds = 90;
  a.cluster.extra_args = {"--exclusive"};
  return a;
}

TEST(SlurmLauncherTest, SbatchFlagsTakeTheSpecOverAdctldsDefaults) {
  SlurmOptions o;
  o.partition = "default-partition";
  o.account = "ml";
  o.time_limit = "4:00:00";
  o.extra_args = {"--mail-type=NONE"};
  const auto args = SlurmBatchArgs(TwoNodeAttempt(), o);
  EXPECT_THAT(args, Contains("--parsable"));
  EXPECT_THAT(args, Contains("--nodes=2"));
  EXPECT_THAT(args, Contains("--ntasks-per-node=2"));
  EXPECT_THAT(args, Contains("--gpus-per-task=1"));
  EXPECT_THAT(args, Contains("--no-requeue"));
  EXPECT_THAT(args, Contains("--signal=USR1@90"));
  EXPECT_THAT(args, Contains("--partition=h200"));  // the spec's
  EXPECT_THAT(args, Contains("--account=ml"));      // adctld's default
  EXPECT_THAT(args, Contains("--time=4:00:00"));
  EXPECT_THAT(args, Not(Contains(::testing::StartsWith("--qos"))));
  EXPECT_THAT(args, Contains("--job-name=adctl-j-abc123-a2"));
  EXPECT_THAT(args, Contains("--output=/shared/adctl/jobs/j-abc123/logs/attempt-2/slurm-%j.out"));
  // adctld's extra flags first, the spec's after (so the spec's win where sbatch takes the last).
  auto mail = std::find(args.begin(), args.end(), "--mail-type=NONE");
  auto exclusive = std::find(args.begin(), args.end(), "--exclusive");
  ASSERT_NE(mail, args.end());
  ASSERT_NE(exclusive, args.end());
  EXPECT_LT(mail, exclusive);
}

TEST(SlurmLauncherTest, BatchScriptRunsOneShepherdedTaskPerRank) {
  SlurmOptions o;
  const std::string script = SlurmBatchScript(TwoNodeAttempt(), o, "/opt/adctl/adctld");
  EXPECT_THAT(script, HasSubstr("#!/bin/bash\n"));
  EXPECT_THAT(script, HasSubstr("srun --ntasks=4 --ntasks-per-node=2 --gpus-per-task=1"));
  EXPECT_THAT(script,
              HasSubstr("--output='/shared/adctl/jobs/j-abc123/logs/attempt-2/rank-%t.log'"));
  EXPECT_THAT(script, HasSubstr("'/opt/adctl/adctld' rank-shepherd --job-dir "
                                "'/shared/adctl/jobs/j-abc123' --attempt 2 --"));
  EXPECT_THAT(script, HasSubstr("'--ranks-from' 'slurm'"));
  EXPECT_THAT(script, Not(HasSubstr("secret-token")));  // the token travels in sbatch's env
  // Ranks stopped by Slurm's warning (exit 75): the job stays until Slurm ends it (TIMEOUT).
  EXPECT_THAT(script,
              HasSubstr("if [ \"$rc\" = 75 ]; then exec sleep infinity; fi\nexit \"$rc\"\n"));

  AttemptLaunch cpu = TwoNodeAttempt();
  cpu.cluster.gpus = false;
  o.cpus_per_task = 3;
  const std::string cpu_script = SlurmBatchScript(cpu, o, "/opt/adctl/adctld");
  EXPECT_THAT(cpu_script, Not(HasSubstr("gpus-per-task")));
  EXPECT_THAT(cpu_script, HasSubstr("--cpus-per-task=3"));
  EXPECT_THAT(SlurmBatchArgs(cpu, o), Contains("--cpus-per-task=3"));
}

TEST(SlurmLauncherTest, QuotesWordsForBash) {
  AttemptLaunch a = TwoNodeAttempt();
  a.cluster_argv.push_back("it's");
  EXPECT_THAT(SlurmBatchScript(a, SlurmOptions(), "/x"), HasSubstr("'it'\\''s'"));
}

TEST(SlurmLauncherTest, ParsesScontrolShowJob) {
  const ClusterJobInfo info = ParseScontrolJob(
      "JobId=42 JobName=adctl-j-1-a1\n   UserId=root(0) GroupId=root(0)\n"
      "   JobState=NODE_FAIL Reason=NodeDown Dependency=(null)\n"
      "   NodeList=gpu-[01-02] BatchHost=gpu-01\n");
  EXPECT_EQ(info.state, "NODE_FAIL");
  EXPECT_EQ(info.reason, "NodeDown");
  EXPECT_EQ(info.nodes, "gpu-[01-02]");
  EXPECT_FALSE(info.active());
  EXPECT_TRUE(info.ended_by_cluster());  // retryable, whatever the ranks exited with
  EXPECT_TRUE(ParseScontrolJob("JobState=PENDING Reason=Resources NodeList=(null)").active());
  EXPECT_EQ(ParseScontrolJob("JobState=PENDING NodeList=(null)").nodes, "");
}

TEST(SlurmLauncherTest, ParsesSacct) {
  const ClusterJobInfo timeout = ParseSacctJob("TIMEOUT|gpu-[01-02]|TimeLimit\n");
  EXPECT_EQ(timeout.state, "TIMEOUT");
  EXPECT_EQ(timeout.nodes, "gpu-[01-02]");
  EXPECT_EQ(timeout.reason, "TimeLimit");
  EXPECT_TRUE(timeout.ended_by_cluster());
  const ClusterJobInfo cancelled = ParseSacctJob("CANCELLED by 1000|n1|None\n");
  EXPECT_EQ(cancelled.state, "CANCELLED");
  EXPECT_FALSE(cancelled.active());
  EXPECT_EQ(ParseSacctJob("PENDING|None assigned|Priority\n").nodes, "");
  EXPECT_TRUE(ParseSacctJob("").state.empty());  // no record: the job stays GONE
}

}  // namespace
}  // namespace adctl
