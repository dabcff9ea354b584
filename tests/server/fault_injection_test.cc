// The attempt monitor under injected faults, deterministically: a scripted process table behind
// the Launcher seam and a ManualClock, with the monitor ticked by hand (no thread, no sleep).
// A rank is killed at a chosen tick, its exit file lost, the clock advanced past the grace
// period and the restart backoff, and the job's path through the state machine checked.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <map>
#include <optional>

#include "common/job_layout.h"
#include "common/job_spec.h"
#include "server/supervisor/supervisor.h"
#include "tests/testing/temp_store.h"

namespace adctl {
namespace {

// Ranks as entries in a table. A rank runs until a test ends it or a signal does: SIGTERM
// stops it with code 75 (exit file written) unless it ignores SIGTERM; SIGKILL kills the
// whole group (no exit file: the shepherd dies too).
class ScriptedLauncher : public Launcher {
 public:
  struct Rank {
    RankLaunch launch;
    pid_t pgid = 0;
    bool running = true;
    bool ignores_sigterm = false;
    bool leftover = false;  // a process of its group that survives everything (a zombie)
    bool reaped = false;
    std::optional<ExitStatus> wait_status;  // what the launcher saw; nullopt: unknown
    std::optional<ExitStatus> exit_file;    // what the shepherd wrote; nullopt: lost
    std::vector<int> signals;
  };

  LauncherKind kind() const override { return LauncherKind::kLocal; }
  bool OnAdctldDevices() const override { return true; }
  Result<LaunchedAttempt> LaunchAttempt(const AttemptLaunch& launch) override {
    LaunchedAttempt out;
    for (const RankLaunch& l : launch.ranks) {
      Rank r;
      r.launch = l;
      r.pgid = next_pgid_++;
      ranks_.push_back(r);
      RankHandle h;
      h.pgid = r.pgid;
      h.start_time = 1;
      h.exit_path = l.exit_path;
      out.ranks.push_back(h);
    }
    return out;
  }
  Status Signal(const RankHandle& handle, int signal) override {
    Rank& r = ByPgid(handle.pgid);
    r.signals.push_back(signal);
    if (signal == SIGKILL) {
      if (r.running) End(&r, ExitStatus{0, SIGKILL}, /*write_exit_file=*/false);
    } else if (signal == SIGTERM && r.running && !r.ignores_sigterm) {
      End(&r, ExitStatus{75, 0}, /*write_exit_file=*/true);
    }
    return Status::Ok();
  }
  std::vector<EndedRank> Reap() override {
    std::vector<EndedRank> out;
    for (Rank& r : ranks_) {
      if (!r.running && !r.reaped) {
        r.reaped = true;
        out.push_back({r.pgid, r.wait_status});
      }
    }
    return out;
  }
  bool ReapsItsRanks() const override { return true; }
  bool Alive(const RankHandle& h) override { return ByPgid(h.pgid).running; }
  bool HasLeftovers(const RankHandle& h) override {
    const Rank& r = ByPgid(h.pgid);
    return r.running || r.leftover;
  }
  void KillLeftovers(const RankHandle& h) override { (void)Signal(h, SIGKILL); }
  Result<ExitStatus> ReadExit(const std::string& exit_path) override {
    for (const Rank& r : ranks_) {
      if (r.launch.exit_path == exit_path && r.exit_file) return *r.exit_file;
    }
    return NotFound("no exit file " + exit_path);
  }

  // --- Faults. `index` counts launches (attempt 1's ranks are 0..N-1, attempt 2's next).
  // The worker exits with `code`; the shepherd writes its exit file and exits the same way.
  void Exit(size_t index, int code) { End(&ranks_.at(index), ExitStatus{code, 0}, true); }
  // The worker dies of `signal` and its exit file is lost; the shepherd's status says only
  // "a signal" (>= 128), which the LocalLauncher cannot tell apart: unknown.
  void DieWithoutATrace(size_t index) {
    Rank& r = ranks_.at(index);
    r.running = false;
    r.wait_status.reset();
    r.exit_file.reset();
  }

  Rank& rank(size_t index) { return ranks_.at(index); }
  size_t launches() const { return ranks_.size(); }

 private:
  void End(Rank* r, ExitStatus how, bool write_exit_file) {
    r->running = false;
    r->wait_status = how;
    if (write_exit_file) r->exit_file = how;
  }
  Rank& ByPgid(pid_t pgid) {
    return *std::find_if(ranks_.begin(), ranks_.end(),
                         [&](const Rank& r) { return r.pgid == pgid; });
  }

  std::vector<Rank> ranks_;
  pid_t next_pgid_ = 1000;
};

class FaultInjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenTestStore(tmp_, &clock_);
    SupervisorOptions& o = supervisor_options_;
    o.data_dir = dir_;
    o.worker_binary = "/bin/false";  // never executed: the launcher is scripted
    o.coordinator_address = "127.0.0.1:1";
    o.devices = CpuSlots(2);
    o.restart_backoff_seconds = 2;
    supervisor_ =
        std::make_unique<Supervisor>(o, store_.get(), Launchers{&launcher_}, nullptr, &clock_);
    ASSERT_TRUE(supervisor_->monitor().Reconcile().ok());
  }
  void TearDown() override {
    supervisor_.reset();
    store_.reset();
  }
  std::string Submit(int ranks, int max_restarts, double grace) {
    SubmitRequest r;
    r.spec_yaml = "name: f\nmodel: {preset: tiny}\nresources: {gpus: " + std::to_string(ranks) +
                  ", max_restarts: " + std::to_string(max_restarts) +
                  ", grace_seconds: " + std::to_string(grace) + "}\n";
    auto job = supervisor_->jobs().Submit(r);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job->first.id;
  }
  void Tick() { supervisor_->monitor().Tick(); }
  JobRecord Job(const std::string& id) { return store_->GetJob(id).value(); }
  bool HasEvent(const std::string& id, const std::string& text) {
    for (const EventRecord& e : store_->ListEvents(id, 0).value()) {
      if (e.message.find(text) != std::string::npos) return true;
    }
    return false;
  }

  TempDir tmp_;  // first: removed after everything that uses it
  const std::string dir_ = tmp_.path();
  ManualClock clock_{1.0e9};  // the store's and the supervisor's time
  std::unique_ptr<Store> store_;
  ScriptedLauncher launcher_;
  SupervisorOptions supervisor_options_;
  std::unique_ptr<Supervisor> supervisor_;
};

TEST_F(FaultInjectionTest, RankKilledWithoutExitFileTearsDownAfterGraceAndRestarts) {
  const std::string id = Submit(/*ranks=*/2, /*max_restarts=*/1, /*grace=*/10);
  Tick();  // tick 1: placed and launched
  ASSERT_EQ(launcher_.launches(), 2u);
  EXPECT_EQ(Job(id).state, JobState::kStarting);
  EXPECT_EQ(Job(id).attempt, 1);
  launcher_.rank(0).ignores_sigterm = true;  // rank 0 will have to be SIGKILLed
  Tick();
  Tick();
  EXPECT_EQ(Job(id).state, JobState::kStarting);

  launcher_.DieWithoutATrace(1);  // tick 4: rank 1 vanishes, no exit file, no status
  Tick();
  // Unknown counts as killed (retryable), and one rank down takes the attempt down.
  EXPECT_EQ(store_->ListRanks(id, 1).value()[1].exit_signal, SIGKILL);
  EXPECT_TRUE(HasEvent(id, "rank 1 killed by signal 9"));
  EXPECT_EQ(launcher_.rank(0).signals, std::vector<int>{SIGTERM});
  EXPECT_EQ(Job(id).state, JobState::kStarting);

  clock_.Advance(9.9);  // inside the grace period: rank 0 keeps its chance
  Tick();
  EXPECT_EQ(launcher_.rank(0).signals, std::vector<int>{SIGTERM});
  clock_.Advance(0.2);  // past it
  Tick();
  EXPECT_EQ(launcher_.rank(0).signals, (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_TRUE(HasEvent(id, "grace period over: SIGKILL sent to the remaining ranks"));
  Tick();  // rank 0's end is reaped: the attempt is over
  JobRecord restarting = Job(id);
  ASSERT_EQ(restarting.state, JobState::kRestarting);
  // The first failure is the job's reason, not the SIGKILL that teardown caused.
  EXPECT_NE(restarting.message.find("rank 1 killed by signal 9 (Killed); restarting"),
            std::string::npos)
      << restarting.message;
  EXPECT_EQ(store_->GetAttempt(id, 1)->end_reason.rfind("rank 1 killed by signal 9", 0), 0u);

  clock_.Advance(1.9);  // inside the restart backoff
  Tick();
  EXPECT_EQ(launcher_.launches(), 2u);
  clock_.Advance(0.2);
  Tick();
  JobRecord relaunched = Job(id);
  EXPECT_EQ(relaunched.state, JobState::kStarting);
  EXPECT_EQ(relaunched.attempt, 2);
  EXPECT_EQ(relaunched.restarts, 1);
  ASSERT_EQ(launcher_.launches(), 4u);
  const auto& argv = launcher_.rank(2).launch.argv;
  auto attempt_flag = std::find(argv.begin(), argv.end(), "--attempt");
  ASSERT_NE(attempt_flag, argv.end());
  EXPECT_EQ(*(attempt_flag + 1), "2");

  launcher_.Exit(2, 0);
  launcher_.Exit(3, 0);
  clock_.Advance(5);
  Tick();
  EXPECT_EQ(Job(id).state, JobState::kSucceeded);
  EXPECT_TRUE(Job(id).devices.empty());
  // Every time the store recorded is the coordinator's clock: 10.1 s of grace, 2.1 s of
  // backoff and 5 s of the second attempt after the submission at 1e9.
  EXPECT_DOUBLE_EQ(Job(id).submitted_at, 1.0e9);
  EXPECT_DOUBLE_EQ(Job(id).finished_at, 1.0e9 + 10.1 + 2.1 + 5);
  EXPECT_DOUBLE_EQ(store_->GetAttempt(id, 2)->ended_at, 1.0e9 + 10.1 + 2.1 + 5);
  for (const EventRecord& e : store_->ListEvents(id, 0).value()) {
    EXPECT_GE(e.time, 1.0e9) << e.message;
    EXPECT_LE(e.time, 1.0e9 + 17.2) << e.message;
  }
}

TEST_F(FaultInjectionTest, ExitFileDecidesOverTheLaunchersStatus) {
  const std::string id = Submit(/*ranks=*/1, /*max_restarts=*/3, /*grace=*/10);
  Tick();
  // The shepherd was killed after the worker wrote "exit 2" (bad spec): fatal, not retried.
  launcher_.Exit(0, 2);
  launcher_.rank(0).wait_status = ExitStatus{0, SIGKILL};
  Tick();
  JobRecord job = Job(id);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.restarts, 0);
  EXPECT_NE(job.message.find("exited with code 2"), std::string::npos) << job.message;
}

TEST_F(FaultInjectionTest, LeftoverProcessHoldsTheAttemptForAtMostFiveSeconds) {
  const std::string id = Submit(/*ranks=*/1, /*max_restarts=*/0, /*grace=*/10);
  Tick();
  launcher_.rank(0).leftover = true;  // survives the group SIGKILL (an unreaped zombie)
  launcher_.Exit(0, 0);
  Tick();
  EXPECT_EQ(launcher_.rank(0).signals, std::vector<int>{SIGKILL});  // the group is cleaned up
  clock_.Advance(4.9);
  Tick();
  EXPECT_EQ(Job(id).state, JobState::kStarting);
  auto devices = supervisor_->monitor().Devices();  // it still holds its device
  EXPECT_TRUE(std::any_of(devices.begin(), devices.end(),
                          [&](const DeviceStatus& d) { return d.job_id == id; }));
  clock_.Advance(0.2);
  Tick();  // gone for good
  Tick();
  EXPECT_EQ(Job(id).state, JobState::kSucceeded);
}

TEST_F(FaultInjectionTest, RestartedCoordinatorCountsARankThatVanishedAsKilled) {
  const std::string id = Submit(/*ranks=*/2, /*max_restarts=*/1, /*grace=*/10);
  Tick();
  ASSERT_EQ(Job(id).state, JobState::kStarting);
  // adctld goes away; while it is gone rank 1 dies and leaves no exit file.
  SupervisorOptions o;
  o.data_dir = dir_;
  o.worker_binary = "/bin/false";
  o.devices = CpuSlots(2);
  o.restart_backoff_seconds = 2;
  supervisor_ =
      std::make_unique<Supervisor>(o, store_.get(), Launchers{&launcher_}, nullptr, &clock_);
  launcher_.DieWithoutATrace(1);
  ASSERT_TRUE(supervisor_->monitor().Reconcile().ok());
  EXPECT_TRUE(HasEvent(id, "adctld restarted: 1 of 2 rank(s) of attempt 1 still alive"));
  Tick();  // rank 1 is found gone (not this adctld's child: liveness, then the exit file)
  EXPECT_EQ(store_->ListRanks(id, 1).value()[1].exit_signal, SIGKILL);
  EXPECT_EQ(launcher_.rank(0).signals, std::vector<int>{SIGTERM});
  Tick();  // rank 0 stopped with 75 when asked
  EXPECT_EQ(store_->ListRanks(id, 1).value()[0].exit_code, 75);
  EXPECT_EQ(Job(id).state, JobState::kRestarting);
  clock_.Advance(2);
  Tick();
  EXPECT_EQ(Job(id).attempt, 2);
  EXPECT_EQ(Job(id).state, JobState::kStarting);
}

TEST_F(FaultInjectionTest, SpecIsParsedOnceAcrossLaunchesAndAResizingResume) {
  const std::string id = Submit(/*ranks=*/2, /*max_restarts=*/0, /*grace=*/10);
  Tick();  // launched from the spec Submit parsed
  ASSERT_EQ(launcher_.launches(), 2u);
  ASSERT_TRUE(supervisor_->jobs().Pause(id, std::nullopt).ok());
  Tick();  // both ranks stopped with 75 on SIGTERM
  ASSERT_EQ(Job(id).state, JobState::kPaused);
  auto resumed = supervisor_->jobs().Resume(id, 1);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  Tick();  // relaunched on one rank from the resized spec
  ASSERT_EQ(launcher_.launches(), 3u);
  EXPECT_EQ(supervisor_->specs().parses(), 0);
  // The rank's spec file is the resized one: one rank, twice the accumulation.
  auto written = LoadJobSpecFile(JobLayout(Job(id).job_dir).spec());
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(written->resources.gpus, 1);
  EXPECT_EQ(written->train.grad_accum, 2);
  EXPECT_EQ(Job(id).gpus, 1);

  // A restarted adctld parses each live job's stored spec once, on first use.
  supervisor_ = std::make_unique<Supervisor>(supervisor_options_, store_.get(),
                                             Launchers{&launcher_}, nullptr, &clock_);
  ASSERT_TRUE(supervisor_->monitor().Reconcile().ok());
  ASSERT_TRUE(supervisor_->jobs().Pause(id, std::nullopt).ok());
  Tick();
  ASSERT_EQ(Job(id).state, JobState::kPaused);
  ASSERT_TRUE(supervisor_->jobs().Resume(id, 2).ok());
  EXPECT_EQ(supervisor_->specs().parses(), 1);
  Tick();
  ASSERT_EQ(launcher_.launches(), 5u);
  EXPECT_EQ(supervisor_->specs().parses(), 1);
  EXPECT_EQ(LoadJobSpecFile(JobLayout(Job(id).job_dir).spec())->train.grad_accum, 1);

  launcher_.Exit(3, 0);
  launcher_.Exit(4, 0);
  Tick();
  EXPECT_EQ(Job(id).state, JobState::kSucceeded);
  EXPECT_EQ(supervisor_->specs().size(), 0u);  // forgotten when the job ended
}

}  // namespace
}  // namespace adctl
