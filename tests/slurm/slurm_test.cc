// The slurm launcher end to end against a real Slurm: munge + slurmctld + slurmd on loopback
// (local_cluster.sh, started once for the suite), a real adctld with --slurm --slurm-cpu, the
// real adctl and adworker. Two CPU ranks (Gloo) per job, each attempt one Slurm batch job.
//
// Skips only when the daemons cannot start (the reason is printed) or adworker is not built.
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "tests/integration/harness.h"
#include "tests/testing/temp_dir.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;

std::string SlurmSpec(int steps, int max_restarts = 0, const std::string& more = "") {
  return TinyJobSpec("slurm-tiny", steps,
                     "launcher: slurm, gpus: 2, max_restarts: " + std::to_string(max_restarts) +
                         ", grace_seconds: 20" + (more.empty() ? "" : ", " + more));
}

std::string ClusterJob(const nlohmann::json& job) {
  return job.contains("cluster_job") ? job["cluster_job"].value("id", "") : "";
}

class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!HaveAdworker()) {
      skip_ = "adworker is not built";
      return;
    }
    // Under /tmp: the daemons' sockets and state live in it.
    std::string error;
    cluster_dir_ = TempDir::TryMake("/tmp", &error).release();
    if (cluster_dir_ == nullptr) {
      skip_ = error;
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::string cmd = std::string(ADCTL_TEST_LOCAL_CLUSTER) + " start " +
                            cluster_dir_->path() + " 2>" + cluster_dir_->path() + "/start.err";
    const int rc = system(cmd.c_str());
    const std::string err = ReadFile(cluster_dir_->path() + "/start.err");
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) {
      skip_ = "the Slurm daemons cannot start here: " + err;
      return;
    }
    if (rc != 0) {
      failure_ = "local_cluster.sh start failed (" + std::to_string(rc) + "): " + err;
      return;
    }
    setenv("SLURM_CONF", (cluster_dir_->path() + "/slurm.conf").c_str(), 1);
    std::printf("local Slurm up in %.1f s (%s)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                cluster_dir_->path().c_str());
  }
  static void TearDownTestSuite() {
    if (cluster_dir_ == nullptr) return;
    const std::string cmd = std::string(ADCTL_TEST_LOCAL_CLUSTER) + " stop " + cluster_dir_->path();
    (void)system(cmd.c_str());
    delete cluster_dir_;  // removes the folder (unless ADCTL_TEST_KEEP is set)
    cluster_dir_ = nullptr;
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(failure_.empty()) << failure_;
    coordinator_ = std::make_unique<Coordinator>(2);
    coordinator_->SetExtraArgs({"--slurm", "--slurm-cpu", "--slurm-cpus-per-task", "1"});
    coordinator_->Start();
  }

  // On a failure, what Slurm says: the queue, every job, the batch scripts' output, the daemons'
  // log tails.
  void TearDown() override {
    if (!HasFailure() || coordinator_ == nullptr) return;
    std::printf("--- squeue --states=all\n%s\n--- scontrol show job\n%s\n",
                coordinator_->Run("squeue", {"--states=all"}).out.c_str(),
                coordinator_->Run("scontrol", {"show", "job"}).out.c_str());
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(coordinator_->dir() + "/data/jobs", ec)) {
      if (e.path().filename().string().rfind("slurm-", 0) == 0) {
        std::printf("--- %s\n%s\n", e.path().c_str(), ReadFile(e.path().string()).c_str());
      }
    }
    for (const char* log : {"/ctld.log", "/d.log"}) {
      const std::string text = ReadFile(cluster_dir_->path() + log);
      std::printf("--- %s (tail)\n%s\n", log,
                  text.substr(text.size() > 3000 ? text.size() - 3000 : 0).c_str());
    }
  }

  // `squeue`/`scontrol` as the test sees the cluster.
  std::string SlurmState(const std::string& cluster_job) {
    CommandResult r = coordinator_->Run("scontrol", {"show", "job", cluster_job});
    const size_t at = r.out.find("JobState=");
    if (at == std::string::npos) return "";
    return r.out.substr(at + 9, r.out.find_first_of(" \n", at) - at - 9);
  }
  bool AnyEventContains(const std::string& id, const std::string& text) {
    auto j = coordinator_->AdctlJson({"events", id});
    for (const auto& e : j.value("events", nlohmann::json::array())) {
      if (e.value("message", "").find(text) != std::string::npos) return true;
    }
    return false;
  }

  static std::string skip_;
  static std::string failure_;
  static TempDir* cluster_dir_;
  std::unique_ptr<Coordinator> coordinator_;
};

std::string SlurmTest::skip_;
std::string SlurmTest::failure_;
TempDir* SlurmTest::cluster_dir_ = nullptr;

TEST_F(SlurmTest, TwoRankJobRunsToSucceededAsOneSlurmJob) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("ok", SlurmSpec(4)));
  CommandResult w = c.Adctl({"wait", id, "--timeout", "120"});
  auto job = c.Describe(id);
  ASSERT_EQ(w.exit_code, 0) << job.dump(2) << c.Adctl({"logs", id, "--rank", "0"}).out;
  EXPECT_EQ(Step(job), 4);
  EXPECT_EQ(job.value("launcher", ""), "slurm");
  const std::string cluster_job = ClusterJob(job);
  ASSERT_FALSE(cluster_job.empty()) << job.dump(2);
  EXPECT_EQ(job["ranks"].size(), 2u);
  EXPECT_TRUE(AnyEventContains(id, "is Slurm job " + cluster_job));
  // The batch job Slurm ran is ours and is over.
  CommandResult shown = c.Run("scontrol", {"show", "job", cluster_job});
  EXPECT_NE(shown.out.find("JobName=adctl-" + id + "-a1"), std::string::npos) << shown.out;
  const std::string state = SlurmState(cluster_job);
  EXPECT_TRUE(state == "COMPLETED" || state == "COMPLETING" || state == "CANCELLED") << state;
  // Rank logs (srun --output) and metrics reach the CLI and /metrics as local ones do.
  CommandResult log1 = c.Adctl({"logs", id, "--rank", "1"});
  EXPECT_EQ(log1.exit_code, 0) << log1.err;
  EXPECT_FALSE(log1.out.empty());
  EXPECT_NE(c.HttpGet("/metrics").find("job_id=\"" + id + "\""), std::string::npos);
  CommandResult described = c.Adctl({"describe", id});
  EXPECT_NE(described.out.find("Slurm job:  " + cluster_job), std::string::npos) << described.out;
}

TEST_F(SlurmTest, CancelStopsTheRanksThroughScancel) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("cancel", SlurmSpec(100000)));
  auto running = c.WaitUntil(
      id, [](const nlohmann::json& j) { return Step(j) >= 1; }, 90, "step 1");
  const std::string cluster_job = ClusterJob(running);
  ASSERT_FALSE(cluster_job.empty());
  EXPECT_EQ(SlurmState(cluster_job), "RUNNING");
  // Each worker resolved its own rank from its Slurm task (`--ranks-from slurm`, as the launch
  // plan wrote it): the shepherd passed the command line through, without rank flags.
  ASSERT_EQ(running["ranks"].size(), 2u) << running.dump(2);
  for (const auto& r : running["ranks"]) {
    const int pid = r.value("pid", 0);
    ASSERT_GT(pid, 0) << running.dump(2);
    std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    EXPECT_NE(cmdline.find(" train "), std::string::npos) << cmdline;
    EXPECT_NE(cmdline.find("--ranks-from slurm"), std::string::npos) << cmdline;
    EXPECT_EQ(cmdline.find("--rank "), std::string::npos) << cmdline;
    EXPECT_EQ(cmdline.find("--world-size"), std::string::npos) << cmdline;
  }
  EXPECT_EQ(c.Adctl({"cancel", id}).exit_code, 0);
  auto job = c.WaitState(id, "CANCELLED", 60);
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_CANCELLED");
  // Both ranks honoured SIGTERM (exit 75), and the batch job is no longer running.
  int stopped = 0;
  for (const auto& r : job["ranks"]) stopped += r.value("exit_code", 0) == 75;
  EXPECT_EQ(stopped, 2) << job.dump(2);
  std::string state;
  for (int i = 0; i < 50; ++i) {
    state = SlurmState(cluster_job);
    if (state != "RUNNING" && state != "PENDING") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(state, "RUNNING");
}

// A batch job that waits in Slurm's queue is not a rank that fails to register: the
// rendezvous timeout counts from its start, and `adctl describe` says why it waits.
TEST_F(SlurmTest, QueuedInSlurmIsNotARendezvousTimeout) {
  Coordinator& c = *coordinator_;
  const std::string busy = c.Submit(c.WriteSpec("busy", SlurmSpec(100000)));
  c.WaitUntil(
      busy, [](const nlohmann::json& j) { return Step(j) >= 1; }, 90, "the first job running");
  std::string spec = SlurmSpec(4);
  spec.replace(spec.find("grace_seconds"), 0, "rendezvous_timeout_seconds: 5, ");
  const std::string queued = c.Submit(c.WriteSpec("queued", spec));
  auto pending = c.WaitUntil(
      queued,
      [](const nlohmann::json& j) {
        if (!j.contains("cluster_job")) return false;
        const std::string reason = j["cluster_job"].value("reason", "");
        return j["cluster_job"].value("state", "") == "PENDING" && !reason.empty() &&
               reason != "None";
      },
      30, "the second batch job pending, with Slurm's reason");
  // Both CPUs are the first job's: Slurm says so (Resources, Priority), and adctld waits past
  // the 5 s timeout.
  EXPECT_EQ(pending.value("attempt", 0), 1);
  CommandResult described = c.Adctl({"describe", queued});
  EXPECT_NE(described.out.find("PENDING"), std::string::npos) << described.out;
  std::this_thread::sleep_for(std::chrono::seconds(7));
  auto still = c.Describe(queued);
  EXPECT_EQ(still.value("attempt", 0), 1) << still.dump(2);
  EXPECT_EQ(still.value("state", ""), "JOB_STATE_STARTING") << still.dump(2);
  EXPECT_EQ(c.Adctl({"cancel", busy}).exit_code, 0);
  CommandResult w = c.Adctl({"wait", queued, "--timeout", "90"});
  EXPECT_EQ(w.exit_code, 0) << c.Describe(queued).dump(2);
  EXPECT_EQ(c.Describe(queued).value("restarts", -1), 0);
}

// Pause checkpoints through scancel --signal=TERM; resume is a new batch job from the checkpoint.
TEST_F(SlurmTest, PauseAndResumeRunAsANewSlurmJob) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("pause", SlurmSpec(100000)));
  auto running = c.WaitUntil(
      id, [](const nlohmann::json& j) { return CheckpointStep(j) >= 2; }, 90, "a checkpoint");
  const std::string first_job = ClusterJob(running);
  EXPECT_EQ(c.Adctl({"pause", id}).exit_code, 0);
  auto paused = c.WaitState(id, "PAUSED", 60);
  const int64_t step = CheckpointStep(paused);
  EXPECT_GE(step, 2);
  EXPECT_EQ(c.Adctl({"resume", id}).exit_code, 0);
  auto resumed = c.WaitUntil(
      id,
      [&](const nlohmann::json& j) {
        return j.value("attempt", 0) == 2 && Step(j) > step &&
               j.value("state", "") == "JOB_STATE_RUNNING";
      },
      90, "attempt 2 past the paused step");
  EXPECT_NE(ClusterJob(resumed), first_job);
  CommandResult log = c.Adctl({"logs", id, "--rank", "0", "--attempt", "2"});
  EXPECT_NE(log.out.find("resumed from"), std::string::npos) << log.out << log.err;
  EXPECT_EQ(c.Adctl({"cancel", id}).exit_code, 0);
  c.WaitState(id, "CANCELLED", 60);
}

// A rank killed: the attempt restarts as a new batch job from the checkpoint. Then the whole
// job step is killed (no exit files): retryable, but the restarts are used up.
TEST_F(SlurmTest, KilledRankRestartsAsANewSlurmJob) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("kill", SlurmSpec(100000, /*max_restarts=*/1)));
  auto first = c.WaitUntil(
      id,
      [](const nlohmann::json& j) {
        return CheckpointStep(j) >= 2 && j["ranks"].size() == 2 &&
               j["ranks"][1].value("pid", 0) > 0;
      },
      90, "a checkpoint in attempt 1");
  const std::string first_job = ClusterJob(first);
  // One Slurm task's worker dies (the host is the only node, so its pid is ours to kill).
  ASSERT_EQ(kill(first["ranks"][1]["pid"].get<int>(), SIGKILL), 0);
  auto second = c.WaitUntil(
      id,
      [](const nlohmann::json& j) {
        return j.value("attempt", 0) == 2 && j.value("state", "") == "JOB_STATE_RUNNING";
      },
      90, "attempt 2 running");
  EXPECT_EQ(second.value("restarts", 0), 1);
  const std::string second_job = ClusterJob(second);
  EXPECT_FALSE(second_job.empty());
  EXPECT_NE(second_job, first_job);
  EXPECT_TRUE(AnyEventContains(id, "rank 1 killed by signal 9"));
  EXPECT_NE(SlurmState(first_job), "RUNNING");

  // Now the whole step dies at once, shepherds included (no exit file, as on a node failure):
  // the batch job's end says how; the restarts are used up, so the job fails naming them.
  auto ranks_up = c.WaitUntil(
      id,
      [](const nlohmann::json& j) {
        return j["ranks"].size() == 2 && j["ranks"][0].value("pid", 0) > 0 &&
               j["ranks"][1].value("pid", 0) > 0;
      },
      60, "attempt 2's ranks registered");
  CommandResult killed = c.Run("scancel", {"--signal=KILL", second_job + ".0"});
  EXPECT_EQ(killed.exit_code, 0) << killed.err;
  auto failed = c.WaitState(id, "FAILED", 60);
  EXPECT_NE(failed.value("message", "").find("restarts exhausted (1/1)"), std::string::npos)
      << failed.dump(2);
  EXPECT_TRUE(AnyEventContains(id, "(Slurm job " + second_job + " ended ")) << failed.dump(2);
}

// Slurm ends the batch job at its time limit: SIGUSR1 grace_seconds before it (the ranks
// checkpoint and stop), then TIMEOUT. adctld names it and restarts from the checkpoint as a new
// batch job. (Slurm's limits are whole minutes, checked every 30 s: this test takes 1-1.5 min.)
TEST_F(SlurmTest, TimeLimitEndsInTimeoutAndRestartsFromTheCheckpoint) {
  Coordinator& c = *coordinator_;
  // grace_seconds 1: Slurm warns at its first 30 s check within 31 s of the limit, so the ranks
  // train (and checkpoint) for about half a minute first.
  std::string spec = SlurmSpec(100000, /*max_restarts=*/1, "slurm_time_limit: \"1\"");
  spec.replace(spec.find("grace_seconds: 20"), 17, "grace_seconds: 1");
  const std::string id = c.Submit(c.WriteSpec("timeout", spec));
  auto first = c.WaitUntil(
      id, [](const nlohmann::json& j) { return CheckpointStep(j) >= 2; }, 90, "a checkpoint");
  const std::string first_job = ClusterJob(first);
  ASSERT_FALSE(first_job.empty());
  CommandResult shown = c.Run("scontrol", {"show", "job", first_job});
  EXPECT_NE(shown.out.find("TimeLimit=00:01:00"), std::string::npos) << shown.out;
  auto second = c.WaitUntil(
      id,
      [](const nlohmann::json& j) {
        return j.value("attempt", 0) == 2 && j.value("state", "") == "JOB_STATE_RUNNING";
      },
      150, "attempt 2 running after the time limit");
  EXPECT_EQ(SlurmState(first_job), "TIMEOUT");
  EXPECT_EQ(second.value("restarts", 0), 1);
  EXPECT_NE(ClusterJob(second), first_job);
  EXPECT_TRUE(AnyEventContains(id, "(Slurm job " + first_job + " ended TIMEOUT"))
      << c.AdctlJson({"events", id}).dump(2);
  EXPECT_TRUE(AnyEventContains(id, "restarting from the newest checkpoint (1/1)"));
  CommandResult log = c.Adctl({"logs", id, "--rank", "0", "--attempt", "2"});
  EXPECT_NE(log.out.find("resumed from"), std::string::npos) << log.out << log.err;
  EXPECT_EQ(c.Adctl({"cancel", id}).exit_code, 0);
  c.WaitState(id, "CANCELLED", 60);
}

// A job in the higher-priority partition preempts (cancels) the adctl job's batch job:
// PREEMPTED, retried as a new batch job from the checkpoint once the cluster has room.
TEST_F(SlurmTest, PreemptionEndsInPreemptedAndRestartsAsANewSlurmJob) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("preempt", SlurmSpec(100000, /*max_restarts=*/1)));
  auto first = c.WaitUntil(
      id, [](const nlohmann::json& j) { return CheckpointStep(j) >= 2; }, 90, "a checkpoint");
  const std::string first_job = ClusterJob(first);
  ASSERT_FALSE(first_job.empty());
  CommandResult urgent = c.Run("sbatch", {"--parsable", "--partition=urgent", "--exclusive",
                                          "--output=/dev/null", "--wrap", "sleep 2"});
  ASSERT_EQ(urgent.exit_code, 0) << urgent.err;
  auto second = c.WaitUntil(
      id,
      [](const nlohmann::json& j) {
        return j.value("attempt", 0) == 2 && j.value("state", "") == "JOB_STATE_RUNNING";
      },
      90, "attempt 2 running after the preemption");
  EXPECT_EQ(SlurmState(first_job), "PREEMPTED");
  EXPECT_EQ(second.value("restarts", 0), 1);
  EXPECT_NE(ClusterJob(second), first_job);
  EXPECT_TRUE(AnyEventContains(id, "(Slurm job " + first_job + " ended PREEMPTED"))
      << c.AdctlJson({"events", id}).dump(2);
  CommandResult log = c.Adctl({"logs", id, "--rank", "0", "--attempt", "2"});
  EXPECT_NE(log.out.find("resumed from"), std::string::npos) << log.out << log.err;
  EXPECT_EQ(c.Adctl({"cancel", id}).exit_code, 0);
  c.WaitState(id, "CANCELLED", 60);
}

// The node goes down under the running batch job: NODE_FAIL, retryable; with no restarts left
// the job fails naming it.
TEST_F(SlurmTest, NodeFailureEndsInNodeFailAndFailsWhenRestartsAreUsedUp) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("nodefail", SlurmSpec(100000)));
  auto running = c.WaitUntil(
      id, [](const nlohmann::json& j) { return Step(j) >= 1; }, 90, "step 1");
  const std::string cluster_job = ClusterJob(running);
  ASSERT_FALSE(cluster_job.empty());
  std::string node = c.Run("sinfo", {"-h", "-o", "%N"}).out;
  node = node.substr(0, node.find('\n'));
  ASSERT_FALSE(node.empty());
  CommandResult down =
      c.Run("scontrol", {"update", "nodename=" + node, "state=down", "reason=adctl-test"});
  EXPECT_EQ(down.exit_code, 0) << down.err;
  auto failed = c.WaitState(id, "FAILED", 60);
  // The node back for the next tests (ReturnToService=2 may have resumed it already).
  (void)c.Run("scontrol", {"update", "nodename=" + node, "state=resume"});
  std::string state;
  for (int i = 0; i < 100 && state != "idle"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    state = c.Run("sinfo", {"-h", "-n", node, "-p", "debug", "-o", "%T"}).out;
    state = state.substr(0, state.find('\n'));
  }
  EXPECT_EQ(state, "idle");
  EXPECT_EQ(SlurmState(cluster_job), "NODE_FAIL");
  const std::string message = failed.value("message", "");
  EXPECT_NE(message.find("(Slurm job " + cluster_job + " ended NODE_FAIL"), std::string::npos)
      << failed.dump(2);
  EXPECT_NE(message.find("restarts exhausted (0/0)"), std::string::npos) << failed.dump(2);
}

TEST_F(SlurmTest, AdctldRestartReattachesToTheRunningSlurmJob) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("restart", SlurmSpec(12)));
  auto before = c.WaitUntil(
      id, [](const nlohmann::json& j) { return Step(j) >= 2; }, 90, "step 2");
  const std::string cluster_job = ClusterJob(before);
  c.Kill9();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(SlurmState(cluster_job), "RUNNING");  // the ranks outlive adctld
  c.Start();
  CommandResult w = c.Adctl({"wait", id, "--timeout", "120"});
  auto job = c.Describe(id);
  EXPECT_EQ(w.exit_code, 0) << job.dump(2);
  EXPECT_EQ(job.value("attempt", 0), 1);  // re-attached: no second attempt
  EXPECT_EQ(job.value("restarts", -1), 0);
  EXPECT_EQ(ClusterJob(job), cluster_job);
  EXPECT_TRUE(AnyEventContains(id, "re-attached (Slurm job " + cluster_job + ")"));
}

// Without --slurm a slurm job is refused at submit, naming the flag (no cluster needed).
TEST(SlurmConfigTest, SlurmJobWithoutASlurmLauncherIsRejected) {
  if (!HaveAdworker()) GTEST_SKIP() << "no adworker";
  Coordinator c(2);
  c.Start();
  CommandResult r = c.Adctl({"submit", c.WriteSpec("refused", SlurmSpec(2))});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE((r.out + r.err).find("--slurm"), std::string::npos) << r.out << r.err;
}

}  // namespace
}  // namespace adctl::testing
