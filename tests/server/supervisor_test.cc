// The supervisor end to end with real processes: a shell-script stand-in for adworker
// (fake_worker.sh) whose behaviour is picked by the spec's name. Covers success, fatal and
// retryable exits, gang teardown, cancel with SIGKILL after grace, pause/resume, queueing,
// idempotent submission and re-attaching after a supervisor restart.
#include "server/supervisor/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "server/launcher/process.h"
#include "tests/server/supervisor_fixture.h"

namespace adctl {
namespace {

TEST_F(SupervisorTest, SucceedsWhenEveryRankExitsZero) {
  std::string id = Submit(Spec("ok", 2));
  JobRecord job = WaitFor(id, JobState::kSucceeded);
  EXPECT_EQ(job.attempt, 1);
  EXPECT_TRUE(job.devices.empty());  // released
  auto ranks = store_->ListRanks(id, 1).value();
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& r : ranks) EXPECT_TRUE(r.exited);
  EXPECT_EQ(store_->GetAttempt(id, 1)->end_reason, "all ranks finished");
}

TEST_F(SupervisorTest, FatalExitFailsWithoutRestart) {
  std::string id = Submit(Spec("fatal", 1, /*max_restarts=*/3));
  JobRecord job = WaitFor(id, JobState::kFailed);
  EXPECT_EQ(job.restarts, 0);
  EXPECT_NE(job.message.find("exited with code 2 (bad spec"), std::string::npos) << job.message;
}

TEST_F(SupervisorTest, RetryableExitRestartsUntilTheBudgetIsSpent) {
  std::string id = Submit(Spec("crash", 1, /*max_restarts=*/2));
  JobRecord job = WaitFor(id, JobState::kFailed);
  EXPECT_EQ(job.restarts, 2);
  EXPECT_EQ(job.attempt, 3);
  EXPECT_NE(job.message.find("restarts exhausted (2/2)"), std::string::npos) << job.message;
  int restarting = 0;
  for (const auto& e : store_->ListEvents(id, 0).value()) {
    restarting += e.to_state == JobState::kRestarting;
  }
  EXPECT_EQ(restarting, 2);
}

TEST_F(SupervisorTest, OneRankDyingTakesTheWholeAttemptDown) {
  std::string id = Submit(Spec("crash-rank1", 2));
  JobRecord job = WaitFor(id, JobState::kFailed);
  EXPECT_NE(job.message.find("rank 1 exited with code 1"), std::string::npos) << job.message;
  auto ranks = store_->ListRanks(id, 1).value();
  EXPECT_EQ(ranks[0].exit_code, 75);  // SIGTERMed by the supervisor, stopped cleanly
  EXPECT_TRUE(NoProcessLeft(id));
}

TEST_F(SupervisorTest, CancelSigkillsAfterTheGracePeriod) {
  std::string id = Submit(Spec("stubborn", 2, 0, /*grace=*/0.5));
  WaitFor(id, JobState::kStarting);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto c = supervisor_->jobs().Cancel(id, std::nullopt, false);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->state, JobState::kCancelling);
  JobRecord job = WaitFor(id, JobState::kCancelled);
  EXPECT_TRUE(NoProcessLeft(id));
  EXPECT_EQ(store_->ListRanks(id, 1).value()[0].exit_signal, SIGKILL);
  EXPECT_EQ(supervisor_->jobs().Cancel(id, std::nullopt, false).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(SupervisorTest, PauseThenResumeStartsANewAttempt) {
  std::string id = Submit(Spec("sleep", 1));
  WaitFor(id, JobState::kStarting);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(supervisor_->jobs().Pause(id, std::nullopt).ok());
  JobRecord paused = WaitFor(id, JobState::kPaused);
  EXPECT_TRUE(NoProcessLeft(id));
  EXPECT_EQ(store_->ListRanks(id, 1).value()[0].exit_code, 75);
  EXPECT_EQ(supervisor_->jobs().Pause(id, std::nullopt).status().code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(supervisor_->jobs().Resume(id, std::nullopt).ok());
  JobRecord resumed = WaitFor(id, JobState::kStarting);
  EXPECT_EQ(resumed.attempt, 2);
  ASSERT_TRUE(supervisor_->jobs().Cancel(id, std::nullopt, /*force=*/true).ok());
  WaitFor(id, JobState::kCancelled);
  EXPECT_TRUE(NoProcessLeft(id));
}

// A checkpoint.dir is checked at submit and again where it is used: two live jobs never share
// one, and a folder swapped for a symlink into a job's folder after the submit fails the launch
// (it was followed into another job's weights and deleted its checkpoints). A NUL byte in a
// path is refused (the checked path and the one the C library would use differ).
TEST_F(SupervisorTest, CheckpointFoldersAreCheckedAtSubmitAndAgainAtLaunch) {
  const std::string mine = dir_ + "/outputs/a";
  const std::string spec = Spec("sleep", 1) + "checkpoint: {dir: " + mine + "}\n";
  std::string a = Submit(spec);
  WaitFor(a, JobState::kStarting);
  SubmitRequest second;
  second.spec_yaml = spec;
  auto shared = supervisor_->jobs().Submit(second);
  ASSERT_FALSE(shared.ok());
  EXPECT_EQ(shared.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(shared.status().message().find("is the checkpoint folder of job " + a),
            std::string::npos)
      << shared.status().message();

  ASSERT_TRUE(supervisor_->jobs().Pause(a, std::nullopt).ok());
  WaitFor(a, JobState::kPaused);
  EXPECT_FALSE(supervisor_->jobs().Submit(second).ok()) << "a paused job is still live";
  // The folder becomes a symlink into a job's folder while the job is paused.
  std::filesystem::remove_all(mine);
  std::filesystem::create_directories(dir_ + "/outputs");
  std::filesystem::create_directory_symlink(dir_ + "/jobs/" + a, mine);
  ASSERT_TRUE(supervisor_->jobs().Resume(a, std::nullopt).ok());
  JobRecord failed = WaitFor(a, JobState::kFailed);
  EXPECT_NE(failed.message.find("launch refused: checkpoint.dir"), std::string::npos)
      << failed.message;
  EXPECT_EQ(failed.attempt, 1) << "no rank was started on the swapped folder";

  SubmitRequest nul;
  nul.spec_yaml = Spec("nul", 1) + "checkpoint: {dir: \"" + dir_ + "/x\\0y\"}\n";
  auto refused = supervisor_->jobs().Submit(nul);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("checkpoint.dir: the path has a NUL byte"),
            std::string::npos)
      << refused.status().message();
}

// A job folder the store has no record of (the database replaced, its WAL lost) is reported at
// start and the ranks still running in it are stopped; the folder stays.
TEST_F(SupervisorTest, FoldersWithoutARecordAreReportedAndTheirRanksStopped) {
  supervisor_.reset();
  const std::string ghost = dir_ + "/jobs/j-ghost";
  std::filesystem::create_directories(ghost);
  // A "rank" of the lost job: its command line names the folder as adworker's does.
  const pid_t rank = fork();
  if (rank == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", "sleep 60; true", "adworker", "--job-dir", ghost.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(rank, 0);
  for (int i = 0; i < 100 && ProcessesWithArgument("--job-dir", ghost).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(ProcessesWithArgument("--job-dir", ghost).size(), 1u);
  StartSupervisor(2);
  int status = 0;
  for (int i = 0; i < 200 && waitpid(rank, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "the lost job's rank runs on";
  EXPECT_TRUE(std::filesystem::exists(ghost)) << "the folder is left in place";
  EXPECT_EQ(supervisor_->jobs().StopRanksOfFoldersWithoutRecord(), 1);
}

TEST_F(SupervisorTest, ResumeOnADifferentRankCountKeepsTheGlobalBatch) {
  supervisor_.reset();
  StartSupervisor(4);
  std::string id = Submit(Spec("sleep", 2, 0, 5, /*grad_accum=*/3));  // global batch 6
  ASSERT_TRUE(supervisor_->jobs().Pause(id, std::nullopt).ok());  // pauses while queued or starting
  WaitFor(id, JobState::kPaused);
  auto bad = supervisor_->jobs().Resume(id, 4);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("not a multiple"), std::string::npos)
      << bad.status().message();
  auto ok = supervisor_->jobs().Resume(id, 1);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->gpus, 1);
  EXPECT_NE(ok->spec_yaml.find("grad_accum: 6"), std::string::npos) << ok->spec_yaml;
  supervisor_->jobs().Cancel(id, std::nullopt, true);
  WaitFor(id, JobState::kCancelled);
}

TEST_F(SupervisorTest, QueuedJobSaysWhyItWaits) {
  std::string a = Submit(Spec("sleep", 2));
  WaitFor(a, JobState::kStarting);
  std::string b = Submit(Spec("ok", 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(store_->GetJob(b)->state, JobState::kQueued);
  EXPECT_EQ(supervisor_->jobs().WaitReason(b), "waiting for 1 CPU slot: 0 free, in use by " + a);
  supervisor_->jobs().Cancel(a, std::nullopt, false);
  WaitFor(b, JobState::kSucceeded);
}

TEST_F(SupervisorTest, SubmissionIdMakesSubmitIdempotent) {
  std::string a = Submit(Spec("sleep", 1), "ci-1");
  std::string again = Submit(Spec("sleep", 1), "ci-1");
  EXPECT_EQ(a, again);
  SubmitRequest other;
  other.spec_yaml = Spec("ok", 1);
  other.submission_id = "ci-1";
  EXPECT_EQ(supervisor_->jobs().Submit(other).status().code(), StatusCode::kAlreadyExists);
  supervisor_->jobs().Cancel(a, std::nullopt, true);
  WaitFor(a, JobState::kCancelled);
}

TEST_F(SupervisorTest, RejectsBadSpecsWithTheFieldName) {
  SubmitRequest r;
  r.spec_yaml = Spec("ok", 3);  // 2 slots
  auto too_big = supervisor_->jobs().Submit(r);
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("resources.gpus"), std::string::npos);
  r.spec_yaml = "name: x\nmodel: {preset: tiny}\ntrain: {max_steps: -1}\n";
  auto bad = supervisor_->jobs().Submit(r);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("train.max_steps"), std::string::npos)
      << bad.status().message();
  // A LoRA wider than the motion module it adapts: refused at submit, not by the worker.
  const std::string tiny = std::string(ADCTL_REPO_ROOT) + "/tests/fixtures/diffusers-tiny";
  r.spec_yaml = "name: x\nmodel: {unet2d: " + tiny + "/unet2d, motion_adapter: " + tiny +
                "/motion_adapter, lora: {rank: 64}}\n";
  auto wide = supervisor_->jobs().Submit(r);
  EXPECT_EQ(wide.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wide.status().message().find("model.lora.rank: 64 is above the width of"),
            std::string::npos)
      << wide.status().message();
}

TEST_F(SupervisorTest, RestartedSupervisorReattachesLiveRanks) {
  std::string id = Submit(Spec("sleep", 2));
  WaitFor(id, JobState::kStarting);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  supervisor_.reset();  // like adctld going away: the ranks keep running
  auto ranks = store_->ListRanks(id, 1).value();
  for (const auto& r : ranks) EXPECT_TRUE(ProcessAlive(r.pgid, r.pgid_start_time));
  StartSupervisor(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(store_->GetJob(id)->state, JobState::kStarting);  // re-attached, not restarted
  EXPECT_EQ(store_->GetJob(id)->attempt, 1);
  ASSERT_TRUE(supervisor_->jobs().Cancel(id, std::nullopt, false).ok());
  WaitFor(id, JobState::kCancelled);
  EXPECT_EQ(store_->ListRanks(id, 1).value()[0].exit_code, 75);  // read from the exit file
  EXPECT_TRUE(NoProcessLeft(id));
}

TEST_F(SupervisorTest, RankThatDiedWhileTheSupervisorWasAwayCountsAsAFailure) {
  std::string id = Submit(Spec("sleep", 1, /*max_restarts=*/1));
  WaitFor(id, JobState::kStarting);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  supervisor_.reset();
  auto rank = store_->ListRanks(id, 1).value()[0];
  SignalProcessGroup(rank.pgid, SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  StartSupervisor(2);
  JobRecord job = WaitFor(id, JobState::kStarting);
  for (int i = 0; i < 100 && store_->GetJob(id)->attempt < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(store_->GetJob(id)->attempt, 2);
  EXPECT_EQ(store_->GetJob(id)->restarts, 1);
  supervisor_->jobs().Cancel(id, std::nullopt, true);
  WaitFor(id, JobState::kCancelled);
}

TEST_F(SupervisorTest, HangWatchdogRestartsAnAttemptWithoutProgress) {
  std::string yaml = Spec("sleep", 1, /*max_restarts=*/1);
  yaml.replace(yaml.find("grace_seconds"), 0, "hang_timeout_seconds: 0.3, ");
  std::string id = Submit(yaml);
  WaitFor(id, JobState::kStarting);
  // Training started but never reports a step.
  ASSERT_TRUE(store_->Transition(id, JobState::kStarting, JobState::kRunning, "started").ok());
  JobRecord job = WaitFor(id, JobState::kRestarting);
  EXPECT_NE(job.message.find("no training progress"), std::string::npos) << job.message;
  supervisor_->jobs().Cancel(id, std::nullopt, true);
  WaitFor(id, JobState::kCancelled);
}

TEST_F(SupervisorTest, RetentionRemovesTheFoldersOfJobsThatEndedLongEnoughAgo) {
  std::string done = Submit(Spec("ok", 1));
  JobRecord job = WaitFor(done, JobState::kSucceeded);
  std::string queued = Submit(Spec("sleep", 1));
  WaitFor(queued, JobState::kStarting);
  ASSERT_TRUE(std::filesystem::exists(job.job_dir));
  EXPECT_EQ(supervisor_->jobs().RemoveEndedJobFolders(3600), 0);  // ended just now
  EXPECT_TRUE(std::filesystem::exists(job.job_dir));
  EXPECT_EQ(supervisor_->jobs().RemoveEndedJobFolders(0), 1);  // the running job is untouched
  EXPECT_FALSE(std::filesystem::exists(job.job_dir));
  EXPECT_TRUE(std::filesystem::exists(store_->GetJob(queued)->job_dir));
  // The record stays, and says what happened to the folder.
  EXPECT_EQ(store_->GetJob(done)->state, JobState::kSucceeded);
  bool said = false;
  for (const EventRecord& e : store_->ListEvents(done, 0, 0).value()) {
    said |= e.message.find("job folder " + job.job_dir + " removed") != std::string::npos;
  }
  EXPECT_TRUE(said);
  supervisor_->jobs().Cancel(queued, std::nullopt, true);
  WaitFor(queued, JobState::kCancelled);
}

TEST_F(SupervisorTest, RanksThatNeverRegisterFailTheAttemptAfterTheRendezvousTimeout) {
  // The fake worker never calls adctld: its ranks never register.
  std::string yaml = Spec("sleep", 2, /*max_restarts=*/0, /*grace=*/0.5);
  yaml.replace(yaml.find("grace_seconds"), 0, "rendezvous_timeout_seconds: 1, ");
  std::string id = Submit(yaml);
  JobRecord job = WaitFor(id, JobState::kFailed, 15);
  EXPECT_NE(job.message.find("rank(s) 0, 1 did not register within 1 s"), std::string::npos)
      << job.message;
  EXPECT_LT(job.finished_at - job.started_at, 8) << "the timeout is the spec's, not a default";
}

}  // namespace
}  // namespace adctl
