// AttemptMonitor, scheduling: the queued jobs whose dependencies allow a start, the devices of
// this host and who holds them, Schedule()'s decision (scheduler.h) carried out — launches,
// preemptions of lower-priority preemptible jobs, wait reasons — and the dry run's placement.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "server/scheduler/scheduler.h"
#include "server/supervisor/attempt_monitor.h"

namespace adctl {

void AttemptMonitor::ReadDependenciesLocked(const JobRecord& job,
                                            const std::map<std::string, JobState>& active,
                                            std::string* pending, std::string* failed) {
  for (const std::string& id : job.after) {
    if (auto live = active.find(id); live != active.end()) {  // not ended: no read needed
      *pending += (pending->empty() ? "" : ", ") + id + " (" + JobStateName(live->second) + ")";
      continue;
    }
    auto dep = store_->GetJob(id);
    if (!dep.ok()) {
      if (failed->empty() && !job.after_any) {
        *failed = id + " is gone (" + dep.status().message() + ")";
      }
      continue;
    }
    if (!IsTerminal(dep->state)) {
      *pending += (pending->empty() ? "" : ", ") + id + " (" + JobStateName(dep->state) + ")";
    } else if (!job.after_any && dep->state != JobState::kSucceeded && failed->empty()) {
      *failed = id + " ended " + JobStateName(dep->state);
    }
  }
}

bool AttemptMonitor::DependenciesAllowStartLocked(const JobRecord& job,
                                                  const std::map<std::string, JobState>& active,
                                                  std::string* waiting) {
  // Slurm's afterok: one dependency that ended otherwise fails the job at once, without a rank.
  std::string pending, failed;
  ReadDependenciesLocked(job, active, &pending, &failed);
  if (!failed.empty()) {
    auto r = recorder_->Transition(job.id, JobState::kFailed,
                                   "dependency " + failed +
                                       "; no rank started (--after waits "
                                       "for SUCCEEDED; --after-any for any end)",
                                   {}, JobState::kQueued);
    if (!r.ok()) spdlog::error("job {}: {}", job.id, r.status().ToString());
    return false;
  }
  if (pending.empty()) return true;
  *waiting = "after " + pending + (job.after_any ? " (any end)" : "");
  return false;
}

void AttemptMonitor::DeviceSnapshotLocked(std::vector<std::string>* names,
                                          std::map<std::string, std::string>* busy) const {
  for (const Device& d : options_.devices) names->push_back(d.name);
  for (const auto& [id, a] : active_) {
    if (!a.launcher->OnAdctldDevices()) continue;  // cluster jobs hold none of this host's
    for (const auto& d : a.devices) (*busy)[d] = id;
  }
}

AttemptMonitor::PlannedPlacement AttemptMonitor::PlanPlacement(const JobRecord& job) {
  std::lock_guard<std::mutex> lock(mu_);
  PlannedPlacement plan;
  if (!launchers_.OnAdctldDevices(job.launcher)) {
    plan.wait_reason = "placed by " + Name(job.launcher) + " (submitted at once)";
    return plan;
  }
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) {
    plan.wait_reason = "unknown: " + jobs.status().ToString();
    return plan;
  }
  std::map<std::string, JobState> active;
  for (const JobRecord& j : jobs.value()) active[j.id] = j.state;
  // The dependencies as the scheduler would see them, read only (DependenciesAllowStartLocked
  // ends a job whose dependency failed).
  std::string pending, failed;
  ReadDependenciesLocked(job, active, &pending, &failed);
  if (!failed.empty()) {
    plan.wait_reason = "it would fail at once: dependency " + failed;
    return plan;
  }
  if (!pending.empty()) {
    plan.wait_reason = "after " + pending + (job.after_any ? " (any end)" : "");
    return plan;
  }
  std::vector<std::string> names;
  std::map<std::string, std::string> busy;
  DeviceSnapshotLocked(&names, &busy);
  std::vector<QueuedJob> queued;
  int64_t last_seq = 0;
  for (const JobRecord& j : jobs.value()) {
    last_seq = std::max(last_seq, j.seq);
    if (j.state != JobState::kQueued || !launchers_.OnAdctldDevices(j.launcher)) continue;
    // A job still waiting for its dependencies holds no place in the queue.
    const bool waits = std::any_of(j.after.begin(), j.after.end(),
                                   [&](const std::string& id) { return active.count(id) > 0; });
    if (!waits) queued.push_back({j.id, j.gpus, j.priority, j.seq});
  }
  queued.push_back({job.id, job.gpus, job.priority, last_seq + 1});
  ScheduleDecision d = Schedule(names, busy, queued, device_unit_, RunningJobsLocked(jobs.value()));
  for (const Placement& p : d.placements) {
    if (p.job_id == job.id) plan.devices = p.devices;
  }
  if (plan.devices.empty()) plan.wait_reason = d.wait_reasons[job.id];
  return plan;
}

std::vector<RunningJob> AttemptMonitor::RunningJobsLocked(const std::vector<JobRecord>& jobs) {
  std::vector<RunningJob> out;
  for (const JobRecord& j : jobs) {
    auto a = active_.find(j.id);
    if (a == active_.end() || !a->second.launcher->OnAdctldDevices() || a->second.devices.empty()) {
      continue;
    }
    RunningJob r{j.id, j.priority, j.seq, false, a->second.teardown, a->second.devices};
    const bool live = j.state == JobState::kStarting || j.state == JobState::kRunning;
    if (live && !r.stopping) {
      auto spec = recorder_->specs().Get(j);
      r.preemptible = spec.ok() && spec.value()->resources.preemptible;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<int> AttemptMonitor::ShrinkOptionsLocked(const JobRecord& job) {
  std::vector<int> out;
  if (job.preempted_by.empty() || job.gpus <= 1) return out;
  auto spec = recorder_->specs().Get(job);
  if (!spec.ok() || !spec.value()->resources.allow_shrink) return out;
  for (int k = job.gpus - 1; k >= 1; --k) {
    if (WithRankCount(*spec.value(), k, "resources.gpus").ok()) out.push_back(k);
  }
  return out;
}

void AttemptMonitor::PreemptLocked(const JobRecord& victim, const JobRecord& by, double now) {
  auto it = active_.find(victim.id);
  if (it == active_.end() || it->second.teardown) return;
  TransitionChanges c;
  c.preempted_by = by.id;
  const std::string message =
      "preempted by " + by.id + " (priority " + std::to_string(by.priority) + " over " +
      std::to_string(victim.priority) + ", needs " + std::to_string(by.gpus) + " " + device_unit_ +
      (by.gpus == 1 ? "" : "s") + "): pausing at a checkpoint (grace " +
      std::to_string(static_cast<int>(victim.grace_seconds)) + " s), then back in the queue";
  auto moved = recorder_->Transition(victim.id, JobState::kPausing, message, c, victim.state);
  if (!moved.ok()) return;  // it changed state meanwhile (ended, paused): nothing to preempt
  StartTeardownLocked(&it->second, victim.grace_seconds, now);
}

void AttemptMonitor::ScheduleLocked() {
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) {
    spdlog::error("scheduler: {}", jobs.status().ToString());
    return;
  }
  std::vector<std::string> names;
  std::map<std::string, std::string> busy;
  DeviceSnapshotLocked(&names, &busy);
  std::vector<QueuedJob> queued;
  std::map<std::string, const JobRecord*> by_id;        // into `jobs`: no copy per tick
  std::map<std::string, std::string> waiting_for_jobs;  // job id → its dependencies' states
  std::map<std::string, JobState> active;               // what --after dependencies wait on
  for (const JobRecord& j : jobs.value()) active[j.id] = j.state;
  for (const JobRecord& j : jobs.value()) {
    if (j.state != JobState::kQueued) {
      by_id[j.id] = &j;
      continue;
    }
    if (!j.after.empty()) {
      std::string waiting;
      if (!DependenciesAllowStartLocked(j, active, &waiting)) {
        if (!waiting.empty()) waiting_for_jobs[j.id] = waiting;
        continue;
      }
    }
    if (!launchers_.OnAdctldDevices(j.launcher)) {
      // The cluster's scheduler places these: submitted at once, one batch job per attempt
      // (a launcher adctld no longer runs fails the launch, naming it).
      std::vector<std::string> ranks;
      for (int r = 0; r < j.gpus; ++r) ranks.push_back(Name(j.launcher) + ":" + std::to_string(r));
      Status st = LaunchLocked(j, ranks, /*is_restart=*/false);
      if (!st.ok()) spdlog::error("job {}: launch failed: {}", j.id, st.ToString());
      continue;
    }
    queued.emplace_back(j.id, j.gpus, j.priority, j.seq, ShrinkOptionsLocked(j));
    by_id[j.id] = &j;
  }
  ScheduleDecision d = Schedule(names, busy, queued, device_unit_, RunningJobsLocked(jobs.value()));
  wait_reasons_ = d.wait_reasons;
  for (const auto& [id, why] : waiting_for_jobs) wait_reasons_[id] = why;
  const double now = clock_->Now();
  for (const Preemption& p : d.preemptions)
    PreemptLocked(*by_id.at(p.victim), *by_id.at(p.by), now);
  for (const Placement& p : d.placements) {
    Status st = LaunchLocked(*by_id.at(p.job_id), p.devices, /*is_restart=*/false);
    if (!st.ok()) spdlog::error("job {}: launch failed: {}", p.job_id, st.ToString());
  }
}

}  // namespace adctl
