// AttemptMonitor, reconcile: after an adctld restart, every non-terminal job's current attempt is
// adopted from the store — ranks whose process group is alive are watched again, the others
// count as ended as their exit records say; a stopping job's teardown starts over.
#include <spdlog/spdlog.h>

#include <string>

#include "common/job_layout.h"
#include "server/supervisor/attempt_monitor.h"

namespace adctl {

Status AttemptMonitor::Reconcile() {
  std::lock_guard<std::mutex> lock(mu_);
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) return jobs.status();
  const double now = clock_->Now();
  for (const JobRecord& job : jobs.value()) {
    if (!HasLiveAttempt(job.state)) continue;
    Attempt a = Attempt::Of(job, job.attempt, launchers_.Find(job.launcher), job.devices, now);
    a.cluster_job = job.cluster_job;
    if (a.launcher == nullptr) {
      const std::string message = "adctld restarted without the " + Name(job.launcher) +
                                  " launcher this job's ranks run under (" +
                                  launchers_.WhyMissing(job.launcher) + "): attempt " +
                                  std::to_string(job.attempt) + " is not watched";
      recorder_->AddEvent(job.id, job.attempt, "reconcile", "error", message);
      spdlog::error("job {}: {}", job.id, message);
      continue;
    }
    auto ranks = store_->ListRanks(job.id, job.attempt);
    if (!ranks.ok()) return ranks.status();
    int alive = 0;
    for (const RankRecord& r : ranks.value()) {
      RankProc p;
      p.rank = r.rank;
      p.pgid = r.pgid;
      p.start_time = r.pgid_start_time;
      p.cluster_job = job.cluster_job;
      p.is_child = false;
      p.exit_known = r.exited;
      p.exit_path = JobLayout(job.job_dir).rank_exit(job.attempt, r.rank);
      p.exited = r.exited && !a.launcher->HasLeftovers(Handle(p));
      p.group_killed_at = now;
      p.exit.exit_code = r.exit_code;
      p.exit.signal = r.exit_signal;
      if (!p.exited && a.launcher->Alive(Handle(p))) ++alive;
      a.ranks.push_back(p);
    }
    const int expected = job.gpus;
    if (job.state == JobState::kRestarting && alive == 0) {
      a.ranks.clear();
      a.relaunch_at = now;
    } else if (static_cast<int>(ranks->size()) < expected && job.state != JobState::kRestarting) {
      // adctld died while launching: ranks it never recorded cannot be supervised.
      a.failure =
          "attempt " + std::to_string(job.attempt) + " was interrupted by an adctld restart";
      a.failure_class = ExitClass::kRetryable;
      StartTeardownLocked(&a, 0, now);
      // ... nor can a batch job it submitted, recorded or not: cancelled, so that the next
      // attempt is the only one.
      const std::string orphan =
          a.cluster_job.empty() ? a.launcher->FindAttempt(job.id, job.attempt) : a.cluster_job;
      if (!orphan.empty()) {
        a.launcher->EndAttempt(orphan);
        recorder_->AddEvent(job.id, job.attempt, "reconcile", "warning",
                            "cancelled " + a.launcher->ClusterJobNoun() + " " + orphan +
                                " of the interrupted attempt " + std::to_string(job.attempt));
      }
    }
    if (job.state == JobState::kCancelling || job.state == JobState::kPausing) {
      StartTeardownLocked(&a, job.grace_seconds, now);
    }
    const std::string message =
        "adctld restarted: " + std::to_string(alive) + " of " + std::to_string(expected) +
        " rank(s) of attempt " + std::to_string(job.attempt) + " still alive, re-attached" +
        (a.cluster_job.empty() ? ""
                               : " (" + a.launcher->ClusterJobNoun() + " " + a.cluster_job + ")");
    recorder_->AddEvent(job.id, job.attempt, "reconcile", "info", message);
    spdlog::info("job {}: {}", job.id, message);
    active_[job.id] = std::move(a);
  }
  return Status::Ok();
}

}  // namespace adctl
