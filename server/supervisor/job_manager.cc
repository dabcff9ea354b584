#include "server/supervisor/job_manager.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "common/checkpoint_dir.h"
#include "common/data_dir_layout.h"
#include "common/fs_util.h"
#include "common/job_layout.h"
#include "common/job_spec.h"
#include "common/lora_check.h"
#include "common/memory_estimate.h"
#include "common/submit_check.h"
#include "server/launcher/process.h"
#include "server/notify/webhooks.h"
#include "server/supervisor/secrets.h"

namespace adctl {

namespace {

// Who a command's event names: the token's name, or "user" when it is not known.
std::string ByWhom(const Requester& by) { return by.name.empty() ? "user" : by.name; }

std::string GraceText(double grace_seconds) {
  return "grace " + std::to_string(static_cast<int>(grace_seconds)) + " s";
}

}  // namespace

Status CheckMayActOn(const Requester& who, const JobRecord& job, const char* verb) {
  if (!who.own_jobs_only || job.submitted_by == who.name) return Status::Ok();
  return Status(StatusCode::kPermissionDenied,
                std::string(verb) + ": job " + job.id + " was submitted by " +
                    (job.submitted_by.empty() ? std::string("an older adctld (no submitter kept)")
                                              : "'" + job.submitted_by + "'") +
                    "; token '" + who.name +
                    "' may act only on its own jobs (adctld --owner-only; an admin may act on "
                    "any)");
}

JobManager::JobManager(const SupervisorOptions& options, Store* store, AttemptMonitor* monitor,
                       JobRecorder* recorder, ChangeFeed* changes, Clock* clock)
    : data_dir_(options.data_dir),
      paths_(options.paths),
      device_count_(options.devices.size()),
      device_unit_(DeviceUnit(options.devices)),
      devices_(options.devices),
      webhook_urls_(options.webhooks.urls),
      store_(store),
      monitor_(monitor),
      recorder_(recorder),
      changes_(changes),
      clock_(clock) {}

Status JobManager::CheckRankCount(const std::string& field, int64_t gpus) const {
  if (gpus < 1) return InvalidArgument(field + ": must be >= 1, got " + std::to_string(gpus));
  if (gpus > static_cast<int64_t>(device_count_)) {
    return InvalidArgument(field + ": " + std::to_string(gpus) + " " + device_unit_ +
                           "s requested but this coordinator has " + std::to_string(device_count_));
  }
  return Status::Ok();
}

Result<JobRecord> JobManager::EndRestartWait(AttemptControl* attempt, JobState to,
                                             const std::string& message) {
  const std::string job_id = attempt->job_id();
  attempt->Forget();
  TransitionChanges release;
  release.devices = std::vector<std::string>{};
  return recorder_->Transition(job_id, to, message, release);
}

Result<JobManager::CheckedSubmit> JobManager::CheckSubmit(const SubmitRequest& request) {
  constexpr size_t kMaxSubmissionId = 128;
  if (request.submission_id.size() > kMaxSubmissionId) {
    return InvalidArgument("submission_id: at most " + std::to_string(kMaxSubmissionId) +
                           " characters, got " + std::to_string(request.submission_id.size()) +
                           " ('" + request.submission_id.substr(0, 32) + "...')");
  }
  auto parsed = ParseJobSpec(request.spec_yaml, request.overrides);
  if (!parsed.ok()) return parsed.status();
  JobSpec spec = parsed.value();
  if (request.gpus) {
    // Only the sign here: the device count is checked below, on the effective spec.
    if (*request.gpus < 1) return CheckRankCount("gpus", *request.gpus);
    spec.resources.gpus = *request.gpus;
  }
  if (request.priority) spec.resources.priority = *request.priority;
  spec.notify.webhooks = MergeWebhookUrls(std::move(spec.notify.webhooks), request.webhooks);
  ADCTL_RETURN_IF_ERROR(ValidateJobSpec(spec));
  ADCTL_RETURN_IF_ERROR(CheckSpecPaths(spec, data_dir_, paths_));
  // After the path policy: only files adctld may read are opened.
  ADCTL_RETURN_IF_ERROR(CheckLoraFitsModel(spec.model));
  {
    SubmitInputs inputs;
    inputs.data_frames_set = SpecNamesField(request.spec_yaml, request.overrides, "data.frames");
    auto live = store_->ListActiveJobs();
    if (!live.ok()) return live.status();
    for (const JobRecord& other : *live) {
      auto other_spec = ParseJobSpec(other.spec_yaml);
      if (other_spec.ok() && other_spec->kind == JobKind::kPreprocess) {
        inputs.caches_being_written.insert(other_spec->preprocess.output);
      }
    }
    ADCTL_RETURN_IF_ERROR(CheckSubmitInputs(spec, inputs));
  }
  ADCTL_RETURN_IF_ERROR(CheckCheckpointDirFree(store_, spec.checkpoint.dir, ""));
  auto launcher = monitor_->launchers().ForSpec(spec.resources);
  if (!launcher.ok()) return launcher.status();
  // A cluster places its ranks: only jobs on adctld's devices are bounded by them.
  if ((*launcher)->OnAdctldDevices()) {
    ADCTL_RETURN_IF_ERROR(CheckRankCount("resources.gpus", spec.resources.gpus));
  }
  const std::string yaml = JobSpecToYaml(spec);
  ADCTL_RETURN_IF_ERROR(CheckLabels(request.labels, "labels"));
  // Dependencies name jobs that exist (so no cycle can form: a new job's id is new).
  std::vector<std::string> after;
  if (request.after_any && request.after.empty()) {
    return InvalidArgument("after_any: needs the jobs to wait for (--after J)");
  }
  for (const std::string& id : request.after) {
    if (std::find(after.begin(), after.end(), id) != after.end()) continue;
    auto other = store_->GetJob(id);
    if (other.status().code() == StatusCode::kNotFound) {
      return InvalidArgument("after: no job " + id.substr(0, 64));
    }
    if (!other.ok()) return other.status();
    after.push_back(id);
  }
  if (after.size() > 64) {
    return InvalidArgument("after: at most 64 jobs, got " + std::to_string(after.size()));
  }
  CheckedSubmit checked;
  checked.yaml = yaml;
  checked.spec = std::move(spec);
  checked.launcher = (*launcher)->kind();
  checked.after = std::move(after);
  return checked;
}

Result<std::pair<JobRecord, bool>> JobManager::Submit(const SubmitRequest& request) {
  auto checked = CheckSubmit(request);
  if (!checked.ok()) return checked.status();
  JobSpec& spec = checked->spec;
  const std::string& yaml = checked->yaml;
  const std::vector<std::string>& after = checked->after;

  if (!request.submission_id.empty()) {
    auto existing = store_->FindJobBySubmissionId(request.submission_id);
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      const JobRecord& job = **existing;
      if (job.spec_yaml != yaml) {
        return Status(StatusCode::kAlreadyExists, "submission id " + request.submission_id +
                                                      " was used for job " + job.id +
                                                      " with a different spec");
      }
      return std::make_pair(job, false);  // the same request, retried
    }
  }

  JobRecord job;
  for (int tries = 0; tries < 8; ++tries) {
    job.id = "j-" + RandomHex(3);
    if (store_->GetJob(job.id).status().code() == StatusCode::kNotFound) break;
  }
  job.name = spec.name;
  job.submission_id = request.submission_id;
  job.spec_yaml = yaml;
  // Ranks get a token per attempt (AttemptMonitor); the store keeps only its hash.
  job.token.clear();
  job.job_dir = std::filesystem::absolute(DataDirLayout(data_dir_).job(job.id)).string();
  job.state = JobState::kQueued;
  job.gpus = static_cast<int>(spec.resources.gpus);
  job.priority = static_cast<int>(spec.resources.priority);
  job.max_restarts = static_cast<int>(spec.resources.max_restarts);
  job.grace_seconds = spec.resources.grace_seconds;
  job.hang_timeout_seconds = spec.resources.hang_timeout_seconds;
  job.rendezvous_timeout_seconds = spec.resources.rendezvous_timeout_seconds;
  job.checkpoint_dir = spec.checkpoint.dir;
  job.launcher = checked->launcher;
  job.after = after;
  job.after_any = request.after_any;
  job.labels = request.labels;
  job.submitted_at = clock_->Now();
  job.progress.total_steps = spec.train.max_steps;
  std::error_code ec;
  std::filesystem::create_directories(JobLayout(job.job_dir).logs(), ec);
  if (ec) {
    (void)RemoveTree(job.job_dir);  // what a full disk let it make
    return Internal("cannot create " + job.job_dir + ": " + ec.message());
  }
  Status inserted = store_->InsertJob(job, request.by);
  if (!inserted.ok()) {
    // No record, no folder: a submit the database refused (a full disk) leaves nothing behind.
    (void)RemoveTree(job.job_dir);
    // A concurrent retry with the same submission id won the race.
    if (!request.submission_id.empty()) {
      auto existing = store_->FindJobBySubmissionId(request.submission_id);
      if (existing.ok() && existing->has_value()) return std::make_pair(**existing, false);
    }
    return inserted;
  }
  recorder_->specs().Remember(job.id, yaml, std::move(spec));
  spdlog::info("job {}: submitted ({} rank(s), priority {})", job.id, job.gpus, job.priority);
  changes_->Notify();
  auto stored = store_->GetJob(job.id);
  if (!stored.ok()) return stored.status();
  return std::make_pair(stored.value(), true);
}

Result<SubmitPlan> JobManager::Plan(const SubmitRequest& request) {
  auto checked = CheckSubmit(request);
  if (!checked.ok()) return checked.status();
  const JobSpec& spec = checked->spec;
  SubmitPlan plan;
  plan.spec_yaml = checked->yaml;
  plan.ranks = static_cast<int>(spec.resources.gpus);
  plan.launcher = checked->launcher;
  plan.global_batch = spec.GlobalBatch();
  plan.trains = TrainsSummary(spec);
  plan.webhooks = MergeWebhookUrls(webhook_urls_, spec.notify.webhooks);
  JobRecord candidate;
  candidate.id = "(this job)";
  candidate.gpus = plan.ranks;
  candidate.priority = static_cast<int>(spec.resources.priority);
  candidate.launcher = checked->launcher;
  candidate.after = checked->after;
  candidate.after_any = request.after_any;
  auto placed = monitor_->PlanPlacement(candidate);
  plan.devices = placed.devices;
  plan.wait_reason = placed.wait_reason;
  if (spec.kind == JobKind::kTrain) {
    auto memory = EstimateTrainingMemory(spec);
    if (memory.ok()) plan.memory = *memory;
    // The smallest memory among the GPUs it would get (all of this host's while it waits).
    for (const Device& d : devices_) {
      const int64_t total = d.reading.memory_total_bytes;
      if (total <= 0) continue;
      const bool counted =
          plan.devices.empty() ||
          std::find(plan.devices.begin(), plan.devices.end(), d.name) != plan.devices.end();
      if (counted && (plan.device_memory_bytes == 0 || total < plan.device_memory_bytes)) {
        plan.device_memory_bytes = total;
      }
    }
  }
  return plan;
}

Result<JobRecord> JobManager::Cancel(const std::string& job_id, std::optional<double> grace,
                                     bool force, const Requester& by) {
  const std::string who = ByWhom(by);
  if (grace) ADCTL_RETURN_IF_ERROR(CheckGraceSeconds("grace_seconds", *grace));
  return monitor_->WithAttempt(job_id, [&](AttemptControl& attempt) -> Result<JobRecord> {
    auto job = store_->GetJob(job_id);
    if (!job.ok()) return job.status();
    ADCTL_RETURN_IF_ERROR(CheckMayActOn(by, *job, "cancel"));
    const double g = force ? 0 : grace.value_or(job->grace_seconds);
    switch (job->state) {
      case JobState::kSucceeded:
      case JobState::kFailed:
      case JobState::kCancelled:
        return FailedPrecondition("cancel: job " + job_id + " already ended (" +
                                  JobStateName(job->state) + ")");
      case JobState::kQueued:
      case JobState::kPaused:
        return recorder_->Transition(job_id, JobState::kCancelled, "cancelled by " + who);
      case JobState::kRestarting:
        if (!attempt.has_processes()) {
          return EndRestartWait(&attempt, JobState::kCancelled, "cancelled by " + who);
        }
        [[fallthrough]];
      default: {
        Result<JobRecord> out = job.value();
        if (job->state != JobState::kCancelling) {
          out = recorder_->Transition(
              job_id, JobState::kCancelling,
              force ? "cancel requested by " + who + " (force: SIGKILL)"
                    : "cancel requested by " + who + " (" + GraceText(g) + ")");
          if (!out.ok()) return out;
        }
        if (!attempt.exists()) {
          // Nothing is running under this adctld: finish the cancel right away.
          return recorder_->Transition(job_id, JobState::kCancelled, "cancelled by " + who);
        }
        attempt.Stop(g);
        return out;
      }
    }
  });
}

Result<JobRecord> JobManager::Pause(const std::string& job_id, std::optional<double> grace,
                                    const Requester& by) {
  const std::string who = ByWhom(by);
  if (grace) ADCTL_RETURN_IF_ERROR(CheckGraceSeconds("grace_seconds", *grace));
  return monitor_->WithAttempt(job_id, [&](AttemptControl& attempt) -> Result<JobRecord> {
    auto job = store_->GetJob(job_id);
    if (!job.ok()) return job.status();
    ADCTL_RETURN_IF_ERROR(CheckMayActOn(by, *job, "pause"));
    const double g = grace.value_or(job->grace_seconds);
    switch (job->state) {
      case JobState::kQueued:
        return recorder_->Transition(job_id, JobState::kPaused,
                                     "paused by " + who + " before it started");
      case JobState::kRestarting:
        if (!attempt.has_processes()) {
          return EndRestartWait(&attempt, JobState::kPaused, "paused by " + who);
        }
        return FailedPrecondition("pause: job " + job_id + " is restarting; try again shortly");
      case JobState::kStarting:
      case JobState::kRunning: {
        auto out = recorder_->Transition(job_id, JobState::kPausing,
                                         "pause requested by " + who + " (" + GraceText(g) + ")");
        if (!out.ok()) return out;
        attempt.Stop(g);
        return out;
      }
      default:
        return FailedPrecondition("pause: job " + job_id + " is " + JobStateName(job->state) +
                                  "; only QUEUED, STARTING or RUNNING jobs can be paused");
    }
  });
}

Result<std::set<int64_t>> JobManager::PinCheckpoint(const std::string& job_id, int64_t step,
                                                    bool pin, const Requester& by) {
  if (step < 1) return InvalidArgument("step: must be >= 1, got " + std::to_string(step));
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  const char* verb = pin ? "pin" : "unpin";
  ADCTL_RETURN_IF_ERROR(CheckMayActOn(by, *job, verb));
  const JobLayout layout(job->job_dir);
  const std::string root = layout.checkpoints(job->checkpoint_dir);
  auto on_disk = [&]() -> Result<std::string> {  // the committed steps, "" when `step` is one
    auto listed = ListCheckpoints(root);
    if (!listed.ok()) return listed.status();
    std::string steps;
    for (const CheckpointInfo& c : *listed) {
      if (c.step == step) return std::string();
      steps += (steps.empty() ? "" : ", ") + std::to_string(c.step);
    }
    return steps.empty() ? std::string("none") : steps;
  };
  auto pins = store_->ListCheckpointPins(job_id);
  if (!pins.ok()) return pins.status();
  if (pin) {
    auto missing = on_disk();
    if (!missing.ok()) return missing.status();
    if (!missing->empty()) {
      return NotFound("job " + job_id + ": no committed checkpoint at step " +
                      std::to_string(step) + " to pin; committed steps: " + *missing);
    }
    pins->insert(step);
  } else if (pins->erase(step) == 0) {
    return NotFound("job " + job_id + ": step " + std::to_string(step) + " is not pinned");
  }
  // The file first: a pin the worker cannot see yet is not a pin.
  std::error_code ec;
  if (std::filesystem::is_directory(layout.dir(), ec)) {
    ADCTL_RETURN_IF_ERROR(WriteCheckpointPins(layout.checkpoint_pins(), *pins));
  }
  ADCTL_RETURN_IF_ERROR(store_->SetCheckpointPin(job_id, step, pin, by.name));
  if (pin) {
    // Retention may have deleted it between the check and the file: say so, keep nothing.
    auto missing = on_disk();
    if (missing.ok() && !missing->empty()) {
      pins->erase(step);
      (void)store_->SetCheckpointPin(job_id, step, false, by.name);
      (void)WriteCheckpointPins(layout.checkpoint_pins(), *pins);
      return NotFound("job " + job_id + ": the checkpoint of step " + std::to_string(step) +
                      " was deleted by retention while being pinned; committed steps: " + *missing);
    }
  }
  (void)recorder_->AddEvent(
      job_id, job->attempt, pin ? "checkpoint_pinned" : "checkpoint_unpinned", "info",
      std::string(pin ? "pinned" : "unpinned") + " by " +
          (by.name.empty() ? std::string("user") : by.name) + ": checkpoint of step " +
          std::to_string(step) + (pin ? " (retention keeps it)" : ""));
  return *pins;
}

Result<JobRecord> JobManager::Resume(const std::string& job_id, std::optional<int> gpus,
                                     const Requester& by) {
  const std::string who = ByWhom(by);
  return monitor_->WithAttempt(job_id, [&](AttemptControl&) -> Result<JobRecord> {
    auto job = store_->GetJob(job_id);
    if (!job.ok()) return job.status();
    ADCTL_RETURN_IF_ERROR(CheckMayActOn(by, *job, "resume"));
    if (job->state != JobState::kPaused) {
      return FailedPrecondition("resume: job " + job_id + " is " + JobStateName(job->state) +
                                "; only PAUSED jobs can be resumed");
    }
    TransitionChanges c;
    std::string message = "resumed by " + who;
    std::optional<JobSpec> resized;  // the spec on the new rank count
    if (gpus && *gpus != job->gpus) {
      if (monitor_->launchers().OnAdctldDevices(job->launcher)) {
        ADCTL_RETURN_IF_ERROR(CheckRankCount("gpus", *gpus));
      }
      auto parsed = recorder_->specs().Get(*job);
      if (!parsed.ok()) return parsed.status();
      auto s = WithRankCount(*parsed.value(), *gpus, "gpus");
      if (!s.ok()) return s.status();
      c.spec_yaml = JobSpecToYaml(*s);
      c.gpus = *gpus;
      message = "resumed by " + who + " on " + std::to_string(*gpus) + " ranks (train.grad_accum " +
                std::to_string(s->train.grad_accum) + ", global batch " +
                std::to_string(s->GlobalBatch()) + " kept)";
      resized = std::move(s.value());
    }
    auto resumed = recorder_->Transition(job_id, JobState::kQueued, message, c);
    if (resumed.ok() && resized) recorder_->specs().Remember(job_id, *c.spec_yaml, *resized);
    return resumed;
  });
}

Result<JobRecord> JobManager::SetPriority(const std::string& job_id, int priority,
                                          const Requester& by) {
  const std::string who = ByWhom(by);
  return monitor_->WithAttempt(job_id, [&](AttemptControl&) -> Result<JobRecord> {
    auto job = store_->GetJob(job_id);
    if (!job.ok()) return job.status();
    ADCTL_RETURN_IF_ERROR(CheckMayActOn(by, *job, "set the priority of"));
    if (IsTerminal(job->state)) {
      return FailedPrecondition("set priority: job " + job_id + " is " + JobStateName(job->state) +
                                "; an ended job has no priority");
    }
    if (priority == job->priority) return job.value();
    auto parsed = recorder_->specs().Get(*job);
    if (!parsed.ok()) return parsed.status();
    JobSpec spec = *parsed.value();
    spec.resources.priority = priority;
    ADCTL_RETURN_IF_ERROR(ValidateJobSpec(spec));  // the range, naming resources.priority
    const std::string yaml = JobSpecToYaml(spec);
    auto out = store_->SetPriority(
        job_id, priority, yaml,
        "priority " + std::to_string(job->priority) + " -> " + std::to_string(priority) + " by " +
            who + (job->state == JobState::kQueued ? " (re-queued at its new place)" : ""));
    if (!out.ok()) return out;
    recorder_->specs().Remember(job_id, yaml, std::move(spec));
    changes_->Notify();
    return out;
  });
}

int JobManager::StopRanksOfFoldersWithoutRecord() {
  std::error_code ec;
  const DataDirLayout layout(data_dir_);
  int found = 0;
  for (const auto& entry : std::filesystem::directory_iterator(layout.jobs(), ec)) {
    if (!entry.is_directory(ec)) continue;
    const std::string id = entry.path().filename().string();
    if (store_->GetJob(id).status().code() != StatusCode::kNotFound) continue;
    ++found;
    int stopped = 0;
    const std::string job_dir = std::filesystem::absolute(entry.path()).string();
    for (pid_t pid : ProcessesWithArgument("--job-dir", job_dir)) {
      const pid_t group = getpgid(pid);
      if (group > 0 && SignalProcessGroup(group, SIGTERM).ok()) ++stopped;
    }
    spdlog::warn(
        "{}: a job folder with no record in {} (was the database replaced or its WAL lost?); "
        "left in place{}",
        job_dir, layout.database(),
        stopped > 0 ? ", its " + std::to_string(stopped) + " live rank(s) sent SIGTERM" : "");
  }
  return found;
}

int JobManager::RemoveEndedJobFolders(double older_than_seconds) {
  const double now = clock_->Now();
  int removed = 0;
  int64_t before = 0;
  while (true) {
    auto jobs = store_->ListJobs({JobState::kSucceeded, JobState::kFailed, JobState::kCancelled},
                                 1000, before);
    if (!jobs.ok() || jobs->empty()) break;
    for (const JobRecord& j : jobs.value()) {
      before = j.seq;
      if (j.finished_at <= 0 || now - j.finished_at < older_than_seconds) continue;
      std::error_code ec;
      if (!std::filesystem::exists(j.job_dir, ec)) continue;
      std::filesystem::remove_all(j.job_dir, ec);
      if (ec) {
        spdlog::warn("job {}: retention cannot remove {}: {}", j.id, j.job_dir, ec.message());
        continue;
      }
      ++removed;
      char hours[32];
      std::snprintf(hours, sizeof(hours), "%g", older_than_seconds / 3600);
      recorder_->AddEvent(
          j.id, j.attempt, "retention", "info",
          "job folder " + j.job_dir + " removed (ended more than " + hours +
              " h ago; --retain-ended-hours)" +
              (j.checkpoint_dir.empty() ? std::string()
                                        : "; checkpoint.dir " + j.checkpoint_dir + " is kept"));
    }
    if (jobs->size() < 1000) break;
  }
  return removed;
}

}  // namespace adctl
