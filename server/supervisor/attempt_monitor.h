// The attempt monitor: everything that happens to a job's processes after the scheduler placed
// it. One tick (every SupervisorOptions::tick_ms on the monitor's thread, or called by a test)
// reaps rank exits through the Launcher, tears attempts down (SIGTERM, SIGKILL after the grace
// period), runs the hang watchdog, decides the job's next state when an attempt's last rank is
// gone (restart policy: success, fatal, retryable within max_restarts, stopped), relaunches
// restarting jobs after the backoff and places queued jobs on free devices (Schedule()).
//
// Restart safety: all state that matters is in the Store. Reconcile() adopts every
// non-terminal job's current attempt: ranks whose process group is alive are watched (they keep
// heartbeating); the others count as ended, as their exit record says (unknown: killed,
// retryable).
//
// Time comes from a Clock and processes from a Launcher, so a test can drive ticks by hand
// (tests/server/fault_injection_test.cc). The class is implemented in parts: attempt_monitor.cc
// (tick, watching), attempt_launch.cc, restart_policy.cc, attempt_schedule.cc, reconcile.cc.
// Thread-safe: one mutex guards the attempts; it is never held while waiting for a rank.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/launcher/launcher.h"
#include "server/launcher/launchers.h"
#include "server/scheduler/scheduler.h"
#include "server/store/store.h"
#include "server/supervisor/change_feed.h"
#include "server/supervisor/exit_policy.h"
#include "server/supervisor/job_recorder.h"
#include "server/supervisor/options.h"

namespace adctl {

struct DeviceStatus {
  Device device;
  std::string job_id;  // holder, "" when free
  int rank = -1;       // the holder's rank on it
};

// The monitor's view of one rank of an attempt.
struct RankProc {
  int rank = 0;
  pid_t pgid = 0;           // local ranks (RankHandle)
  uint64_t start_time = 0;  // local ranks
  std::string cluster_job;  // slurm ranks: the attempt's batch job
  bool is_child = false;    // launched by this adctld (the launcher reaps it)
  bool exit_known = false;  // the worker ended; `exit` says how
  bool exited = false;      // ... and nothing of it is left (or the monitor gave up waiting)
  double group_killed_at = 0;
  ExitStatus exit;
  std::string exit_path;
};

// A job whose current attempt may have processes, or that waits for its relaunch.
struct ActiveAttempt {
  std::string job_id;
  int attempt = 0;
  Launcher* launcher = nullptr;  // the job's (JobRecord::launcher)
  std::string cluster_job;       // slurm: the batch job of this attempt
  std::vector<std::string> devices;
  std::vector<RankProc> ranks;
  double grace_seconds = 60;
  // Teardown: SIGTERM sent, SIGKILL at `kill_deadline`.
  bool teardown = false;
  bool killed = false;
  double kill_deadline = 0;
  std::string failure;  // first failing rank's description ("" if none)
  ExitClass failure_class = ExitClass::kSuccess;
  // RESTARTING with no processes: relaunch at this time.
  double relaunch_at = 0;
  // Hang watchdog: no new step for this long while RUNNING fails the attempt (0: off).
  double hang_timeout_seconds = 0;
  double rendezvous_timeout_seconds = 120;  // for every rank to register, from launched_at
  bool all_registered = false;
  double launched_at = 0;

  // Attempt `attempt` of `job` on `devices`, launched (or adopted) at `now`: the job's grace,
  // hang and rendezvous timeouts.
  static ActiveAttempt Of(const JobRecord& job, int attempt, Launcher* launcher,
                          std::vector<std::string> devices, double now);
};

class AttemptMonitor;

// A job operation's handle on the job's attempt, valid inside AttemptMonitor::WithAttempt.
class AttemptControl {
 public:
  const std::string& job_id() const { return job_id_; }
  // The job has an attempt under this monitor (running, tearing down or awaiting relaunch).
  bool exists() const { return attempt_ != nullptr; }
  // ... and some rank of it has not ended yet.
  bool has_processes() const;
  // Drops an attempt without processes (a RESTARTING job that will not be relaunched).
  void Forget();
  // SIGTERM to every rank now, SIGKILL once `grace_seconds` passed (<= 0: SIGKILL now). The job
  // ends when the last rank is gone (FinishAttempt reads the job's state: CANCELLING, PAUSING).
  void Stop(double grace_seconds);

 private:
  friend class AttemptMonitor;
  AttemptControl(AttemptMonitor* monitor, const std::string& job_id, ActiveAttempt* attempt)
      : monitor_(monitor), job_id_(job_id), attempt_(attempt) {}
  AttemptMonitor* const monitor_;
  const std::string job_id_;
  ActiveAttempt* attempt_;  // null: none
};

class AttemptMonitor {
 public:
  // `launchers`: those adctld runs, by kind (each job's record names its kind).
  AttemptMonitor(const SupervisorOptions& options, Store* store, Launchers launchers,
                 JobRecorder* recorder, ChangeFeed* changes, Clock* clock);
  ~AttemptMonitor();

  // Adopts the attempts the store says exist (adctld restarted). Call once, before ticking.
  Status Reconcile();
  // One round: reap, update attempts, finish or relaunch them, schedule queued jobs.
  void Tick();
  // Ticks every tick_ms on a thread until `changes` closes; StopThread() joins it.
  void StartThread();
  void StopThread();

  // Runs `operation` under the monitor's lock with the job's attempt, so that no tick finishes
  // or relaunches the attempt in between (job operations: cancel, pause, resume).
  Result<JobRecord> WithAttempt(const std::string& job_id,
                                const std::function<Result<JobRecord>(AttemptControl&)>& operation);

  // Called with the job (its record as the attempt ends), the attempt and its rank count when
  // all of an attempt's ranks are gone, before the job's next state is decided (what the ranks
  // left undelivered is taken then). Set before the first tick.
  using AttemptEndedHook = std::function<void(const JobRecord& job, int attempt, int world_size)>;
  void SetAttemptEndedHook(AttemptEndedHook hook) { attempt_ended_ = std::move(hook); }

  // Why a QUEUED job waits ("" when it does not), as of the last schedule.
  std::string WaitReason(const std::string& job_id);
  // What a job not yet submitted (`job`: its gpus, priority, launcher, after) would get if it
  // were queued now, behind the queue's jobs of its priority: the devices it would start on, or
  // why it would wait (`adctl submit --dry-run`). Changes nothing.
  struct PlannedPlacement {
    std::vector<std::string> devices;
    std::string wait_reason;
  };
  PlannedPlacement PlanPlacement(const JobRecord& job);
  std::vector<DeviceStatus> Devices();
  // Whether each rank of `attempt` of the job still has processes (absent: not watched).
  std::map<int, bool> RanksAlive(const std::string& job_id, int attempt);
  // What the cluster says about the job's current batch job (slurm jobs; empty otherwise).
  ClusterJobInfo ClusterJob(LauncherKind launcher, const std::string& cluster_job);
  const Launchers& launchers() const { return launchers_; }

 private:
  friend class AttemptControl;
  using Attempt = ActiveAttempt;

  void UpdateAttemptLocked(Attempt* a, double now);
  void ObserveRankLocked(Attempt* a, size_t index, double now);
  void StartTeardownLocked(Attempt* a, double grace_seconds, double now);
  void WatchForHangLocked(Attempt* a, double now);
  // All ranks of `a` are gone: decide the job's next state. Returns false to drop `a`.
  bool FinishAttemptLocked(Attempt* a, double now);
  Status LaunchLocked(const JobRecord& job, const std::vector<std::string>& devices,
                      bool is_restart);
  // Whether a queued job's dependencies (--after) let it start. While some have not ended,
  // false with `*waiting` = "after J (RUNNING), …"; when one ended other than the job waits
  // for, false after moving the job to FAILED here.
  // `active`: the non-terminal jobs' states (the tick's snapshot); only ended ones are read.
  // The devices by name and which job holds each busy one (this host's launcher only).
  void DeviceSnapshotLocked(std::vector<std::string>* names,
                            std::map<std::string, std::string>* busy) const;
  // The `--after` jobs of `job` that have not ended ("j-1 (RUNNING), …") and the first that
  // ended other than the job waits for ("j-2 ended CANCELLED", "j-3 is gone (…)"; with
  // after_any none). Reads only.
  void ReadDependenciesLocked(const JobRecord& job, const std::map<std::string, JobState>& active,
                              std::string* pending, std::string* failed);
  bool DependenciesAllowStartLocked(const JobRecord& job,
                                    const std::map<std::string, JobState>& active,
                                    std::string* waiting);
  void ScheduleLocked();
  // The jobs of `jobs` holding this host's devices, as the scheduler sees them for preemption.
  std::vector<RunningJob> RunningJobsLocked(const std::vector<JobRecord>& jobs);
  // The smaller rank counts a preempted job with resources.allow_shrink may resume on (its
  // global batch kept), largest first; empty for any other job.
  std::vector<int> ShrinkOptionsLocked(const JobRecord& job);
  // Pauses `victim` (STARTING or RUNNING, preemptible) for `by`: PAUSING with preempted_by set
  // and its ranks told to checkpoint and stop; FinishAttemptLocked queues it again.
  void PreemptLocked(const JobRecord& victim, const JobRecord& by, double now);
  static RankHandle Handle(const RankProc& rank);

  // Constant after construction.
  const SupervisorOptions options_;
  Store* const store_;
  const Launchers launchers_;
  JobRecorder* const recorder_;
  ChangeFeed* const changes_;
  Clock* const clock_;
  const std::string device_unit_;   // "GPU" or "CPU slot"
  AttemptEndedHook attempt_ended_;  // set before the first tick

  std::mutex mu_;
  std::map<std::string, Attempt> active_;            // guarded by mu_; by job id
  std::map<std::string, std::string> wait_reasons_;  // guarded by mu_
  // Ranks the launcher reaped that no attempt claimed yet: pgid → how it ended.
  std::map<pid_t, std::optional<ExitStatus>> reaped_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace adctl
