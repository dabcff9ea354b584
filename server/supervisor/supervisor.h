// The coordinator's core: job lifecycle, scheduling, rank supervision and the worker-facing
// operations. gRPC and HTTP handlers are thin wrappers over this class (server/grpc/,
// server/http/), so everything here is testable without a socket.
//
// One background thread ("tick", every 100 ms) reaps rank exits, enforces grace periods,
// finishes attempts (restart policy), relaunches restarting jobs and places queued ones.
// Public methods are thread-safe; they may block on SQLite but never on a rank.
//
// Restart safety: all state that matters is in the Store. `Start()` reconciles every
// non-terminal job: ranks recorded for the current attempt are re-attached when their process
// group is alive (they keep heartbeating) and treated as ended otherwise (their exit file says
// how). A rank whose exit is unknown counts as killed (retryable).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/launcher/launcher.h"
#include "server/launcher/process.h"
#include "server/scheduler/device_inventory.h"
#include "server/store/store.h"
#include "server/supervisor/exit_policy.h"

namespace adctl {

// Receives what Prometheus exports (server/metrics/). Called from handler and tick threads.
class SupervisorObserver {
 public:
  virtual ~SupervisorObserver() = default;
  virtual void OnMetrics(const std::vector<MetricRecord>& points) = 0;
  virtual void OnCheckpoint(const CheckpointRecord& checkpoint) = 0;
  virtual void OnRestart(const std::string& job_id) = 0;
  virtual void OnJobFinished(const std::string& job_id, JobState state) = 0;
};

struct SupervisorOptions {
  std::string data_dir;             // jobs/<id>/ live here
  std::string worker_binary;        // absolute path to adworker
  std::string coordinator_address;  // what ranks dial ("127.0.0.1:50051")
  std::vector<Device> devices;
  int heartbeat_interval_ms = 1000;
  double restart_backoff_seconds = 1.0;
  int tick_ms = 100;
};

struct SubmitRequest {
  std::string spec_yaml;
  std::vector<std::string> overrides;
  std::optional<int> gpus;
  std::optional<int> priority;
  std::string submission_id;
};

struct DeviceStatus {
  Device device;
  std::string job_id;  // holder, "" when free
};

class Supervisor {
 public:
  Supervisor(SupervisorOptions options, Store* store, Launcher* launcher,
             SupervisorObserver* observer);
  ~Supervisor();

  // Reconciles the store with the processes that exist, then starts the tick thread.
  Status Start();
  // Stops the tick thread. Ranks keep running (a restarted adctld re-attaches them).
  void Stop();

  // --- JobService operations.
  // Returns the job and whether it was created (false: same submission id seen before).
  Result<std::pair<JobRecord, bool>> Submit(const SubmitRequest& request);
  Result<JobRecord> Cancel(const std::string& job_id, std::optional<double> grace_seconds,
                           bool force);
  Result<JobRecord> Pause(const std::string& job_id, std::optional<double> grace_seconds);
  Result<JobRecord> Resume(const std::string& job_id, std::optional<int> gpus);
  std::string WaitReason(const std::string& job_id);
  std::vector<DeviceStatus> Devices();
  // Blocks until something changed after `*version` or `timeout_ms` passed; updates *version.
  void WaitForChange(uint64_t* version, int timeout_ms);
  // Current attempt's ranks with liveness.
  std::vector<RankRecord> LiveRanks(const std::string& job_id, std::map<int, bool>* alive);

  // --- WorkerService operations. `token` is the bearer token the rank presented.
  Status Authorize(const std::string& job_id, const std::string& token);
  Status RegisterRank(const std::string& job_id, int attempt, int rank, int world_size, int pid,
                      const std::string& host);
  // Returns whether the rank must stop (pause/cancel), with the reason.
  Result<std::pair<bool, std::string>> Heartbeat(const std::string& job_id, int attempt, int rank,
                                                 int64_t step, int pid);
  Status KvSet(const std::string& job_id, int attempt, const std::string& key,
               const std::string& value);
  // Waits up to `timeout_ms` (capped at 30 s); nullopt when the key did not appear.
  Result<std::optional<std::string>> KvGet(const std::string& job_id, int attempt,
                                           const std::string& key, int timeout_ms);
  Status ReportMetrics(const std::string& job_id, int attempt, int rank,
                       std::vector<MetricRecord> points);
  Status ReportTrainingStarted(const std::string& job_id, int attempt, int rank,
                               int64_t resumed_from_step, int64_t total_steps);
  Status ReportCheckpoint(const std::string& job_id, int attempt, int rank,
                          CheckpointRecord checkpoint);
  Status ReportWorkerEvent(const std::string& job_id, int attempt, int rank,
                           const std::string& level, const std::string& message);

  int heartbeat_interval_ms() const { return options_.heartbeat_interval_ms; }

 private:
  struct RankProc {
    int rank = 0;
    pid_t pgid = 0;
    uint64_t start_time = 0;
    bool is_child = false;    // launched by this adctld (waitpid works)
    bool exit_known = false;  // the worker ended; `exit` says how
    bool exited = false;      // ... and its process group is empty (or gave up waiting)
    double group_killed_at = 0;
    ExitStatus exit;
    std::string exit_path;
  };
  // A job whose current attempt may have processes, or that waits for its relaunch.
  struct ActiveAttempt {
    std::string job_id;
    int attempt = 0;
    std::vector<std::string> devices;
    std::vector<RankProc> ranks;
    double grace_seconds = 60;
    // Teardown: SIGTERM sent at `teardown_started`, SIGKILL after `kill_deadline`.
    bool teardown = false;
    bool killed = false;
    double kill_deadline = 0;
    std::string failure;  // first failing rank's description ("" if none)
    ExitClass failure_class = ExitClass::kSuccess;
    // RESTARTING with no processes: relaunch at this time.
    double relaunch_at = 0;
    // Hang watchdog: no new step for this long while RUNNING fails the attempt (0: off).
    double hang_timeout_seconds = 0;
    double launched_at = 0;
  };

  void TickLoop();
  void Tick();
  void ReapChildrenLocked();
  void UpdateAttemptLocked(ActiveAttempt* a, double now);
  void StartTeardownLocked(ActiveAttempt* a, double grace_seconds, double now);
  // All ranks of `a` are gone: decide the job's next state. Returns false to drop `a`.
  bool FinishAttemptLocked(ActiveAttempt* a, double now);
  Status LaunchLocked(const JobRecord& job, const std::vector<std::string>& devices,
                      bool is_restart);
  void ScheduleLocked();
  Status ReconcileLocked();
  void NotifyLocked();
  // Stores one event row (the state-transition events are written by Store::Transition).
  Status AddEvent(const std::string& job_id, int attempt, const std::string& kind,
                  const std::string& level, const std::string& message);
  Result<JobRecord> TransitionLocked(const std::string& job_id, JobState to,
                                     const std::string& message,
                                     const TransitionChanges& changes = {});

  // Constant after construction.
  const SupervisorOptions options_;
  Store* const store_;
  Launcher* const launcher_;
  SupervisorObserver* const observer_;
  std::string device_unit_;  // "GPU" or "CPU slot"

  std::mutex mu_;
  std::condition_variable changed_cv_;               // guarded by mu_
  uint64_t version_ = 0;                             // guarded by mu_
  std::map<std::string, ActiveAttempt> active_;      // guarded by mu_; by job id
  std::map<std::string, std::string> wait_reasons_;  // guarded by mu_
  std::map<pid_t, int> reaped_;                      // guarded by mu_; pid → wait status
  bool stopping_ = false;                            // guarded by mu_
  std::thread tick_thread_;
};

}  // namespace adctl
