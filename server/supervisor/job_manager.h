// Job operations: submit, cancel, pause and resume, the commands of the JobService.
//
// Submit parses and validates the spec once (ParseJobSpec with the `--set` overrides, then the
// request's gpus/priority) and stores its canonical YAML with the columns the coordinator needs
// later (gpus, priority, max_restarts, grace_seconds, hang_timeout_seconds); the parsed spec
// stays in the recorder's ParsedSpecs for the launches and a resize on resume. Cancel, pause and
// resume decide the job's next state from its current one and act on its running attempt through
// the AttemptMonitor, under its lock. Thread-safe.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "common/memory_estimate.h"
#include "common/status.h"
#include "server/store/store.h"
#include "server/supervisor/attempt_monitor.h"
#include "server/supervisor/change_feed.h"
#include "server/supervisor/job_recorder.h"
#include "server/supervisor/options.h"

namespace adctl {

// Who asks for a command on a job: the token's name (the job's events say who; "" : "user"), and
// whether that token may act only on the jobs it submitted (adctld --owner-only, a submitter).
struct Requester {
  Requester() = default;
  Requester(std::string token_name, bool own_jobs_only = false)  // NOLINT: a name alone is common
      : name(std::move(token_name)), own_jobs_only(own_jobs_only) {}
  Requester(const char* token_name) : name(token_name) {}  // NOLINT: as above
  std::string name;
  bool own_jobs_only = false;
};

// OK when `who` may `verb` (cancel, pause, resume, export) `job`; PermissionDenied naming the
// job's submitter when `who` may act only on its own jobs and did not submit it.
Status CheckMayActOn(const Requester& who, const JobRecord& job, const char* verb);

struct SubmitRequest {
  std::string spec_yaml;
  std::vector<std::string> overrides;
  std::optional<int> gpus;
  std::optional<int> priority;
  std::string submission_id;
  std::string by;  // who asks: the token's name ("owner" without tokens); "" unknown
  std::vector<std::string> after;  // jobs it waits for (afterok; with after_any, afterany)
  bool after_any = false;
  std::map<std::string, std::string> labels;
  std::vector<std::string> webhooks;  // after the spec's notify.webhooks
};

// What a submit would do now (`adctl submit --dry-run`; JobManager::Plan).
struct SubmitPlan {
  std::string spec_yaml;  // the effective spec, as it would be stored
  int ranks = 0;
  LauncherKind launcher = LauncherKind::kLocal;
  int64_t global_batch = 0;
  std::vector<std::string> devices;  // where it would start now (empty: it would wait)
  std::string wait_reason;
  std::optional<MemoryEstimate> memory;  // training jobs
  int64_t device_memory_bytes = 0;       // the smallest GPU it could get (0: no GPUs)
  std::string trains;
  std::vector<std::string> webhooks;  // adctld's and the job's
};

class JobManager {
 public:
  JobManager(const SupervisorOptions& options, Store* store, AttemptMonitor* monitor,
             JobRecorder* recorder, ChangeFeed* changes, Clock* clock);

  // Returns the job and whether it was created (false: same submission id seen before).
  Result<std::pair<JobRecord, bool>> Submit(const SubmitRequest& request);
  // Every check Submit makes, then what the job would get now; nothing is created.
  Result<SubmitPlan> Plan(const SubmitRequest& request);
  // `force`: SIGKILL now. Otherwise SIGTERM, then SIGKILL after the grace period (default: the
  // spec's resources.grace_seconds).
  // `by` names who asks in the job's events and may limit it to its own jobs (CheckMayActOn).
  Result<JobRecord> Cancel(const std::string& job_id, std::optional<double> grace_seconds,
                           bool force, const Requester& by = {});
  Result<JobRecord> Pause(const std::string& job_id, std::optional<double> grace_seconds,
                          const Requester& by = {});
  // `gpus`: resume on another rank count, keeping the global batch through train.grad_accum.
  Result<JobRecord> Resume(const std::string& job_id, std::optional<int> gpus,
                           const Requester& by = {});
  // `adctl set JOB --priority P`: the job's priority and its spec's resources.priority, for the
  // next schedule (a QUEUED job takes its new place; a running one may now preempt or be
  // preempted). FailedPrecondition for an ended job.
  Result<JobRecord> SetPriority(const std::string& job_id, int priority, const Requester& by = {});
  // `adctl ckpt pin|unpin`: records (SQLite) that retention must keep (or may again delete)
  // the checkpoint of `step`, and writes the job's pins file that rank 0's retention reads at
  // each commit (JobLayout::checkpoint_pins). Pinning needs the committed checkpoint on disk
  // (NotFound naming the steps there); unpinning a step that is not pinned is NotFound. Returns
  // the pinned steps afterwards.
  Result<std::set<int64_t>> PinCheckpoint(const std::string& job_id, int64_t step, bool pin,
                                          const Requester& by = {});
  // Why a QUEUED job waits ("" otherwise).
  std::string WaitReason(const std::string& job_id) { return monitor_->WaitReason(job_id); }

  // Folders under jobs/ that the store has no record of (a database replaced, a WAL lost):
  // each is reported (a warning naming it) and left in place, and the ranks still running in
  // it (processes with `--job-dir <folder>`) get SIGTERM. Returns how many there were.
  int StopRanksOfFoldersWithoutRecord();

  // Retention: removes the folder (spec, logs, checkpoints, samples, exports) of every job that
  // ended more than `older_than_seconds` ago, with an event saying so; the job's record and
  // metric history stay. Returns how many folders were removed.
  int RemoveEndedJobFolders(double older_than_seconds);

 private:
  struct CheckedSubmit {
    JobSpec spec;  // the effective spec
    std::string yaml;
    LauncherKind launcher = LauncherKind::kLocal;
    std::vector<std::string> after;  // deduplicated, each an existing job
  };
  // Submit's checks: the spec with the request's gpus, priority and webhooks, its paths, its
  // LoRA against the model files, its inputs, the checkpoint folder, the launcher, the rank
  // count, the labels and the dependencies.
  Result<CheckedSubmit> CheckSubmit(const SubmitRequest& request);
  // A RESTARTING job whose attempt has no processes left: drops the relaunch and moves the job
  // to `to`, releasing its devices.
  Result<JobRecord> EndRestartWait(AttemptControl* attempt, JobState to,
                                   const std::string& message);
  // InvalidArgument unless 1 <= gpus <= the coordinator's devices.
  Status CheckRankCount(const std::string& field, int64_t gpus) const;

  const std::string data_dir_;
  const PathRoots paths_;
  const size_t device_count_;
  const std::string device_unit_;
  const std::vector<Device> devices_;
  const std::vector<std::string> webhook_urls_;  // adctld's --webhook
  Store* const store_;
  AttemptMonitor* const monitor_;
  JobRecorder* const recorder_;
  ChangeFeed* const changes_;
  Clock* const clock_;
};

}  // namespace adctl
