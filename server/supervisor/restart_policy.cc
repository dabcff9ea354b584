// AttemptMonitor, the restart policy: when every rank of an attempt is gone, the job's next state
// from how its ranks ended and the state it was in — SUCCEEDED, CANCELLED, PAUSED (and QUEUED
// again when it was preempted), FAILED (fatal, or restarts exhausted) or RESTARTING after the
// backoff.
#include <algorithm>
#include <set>
#include <string>

#include "common/job_layout.h"
#include "server/supervisor/attempt_monitor.h"

namespace adctl {

bool AttemptMonitor::FinishAttemptLocked(Attempt* a, double now) {
  if (a->launcher != nullptr && !a->cluster_job.empty()) a->launcher->EndAttempt(a->cluster_job);
  auto job = store_->GetJob(a->job_id);
  if (!job.ok()) return false;
  if (attempt_ended_ && job->attempt == a->attempt) {
    attempt_ended_(*job, a->attempt, static_cast<int>(a->ranks.size()));
  }
  const bool all_ok =
      !a->ranks.empty() && std::all_of(a->ranks.begin(), a->ranks.end(), [](const RankProc& r) {
        return ClassifyExit(r.exit) == ExitClass::kSuccess;
      });
  std::string summary = all_ok ? "all ranks finished" : a->failure;
  if (summary.empty()) {
    std::set<std::string> exits;
    for (const RankProc& r : a->ranks) exits.insert(DescribeExit(r.exit));
    for (const auto& e : exits) summary += (summary.empty() ? "ranks " : "; ") + e;
  }
  TransitionChanges end;
  end.end_attempt_reason = summary.empty() ? "ended" : summary;
  end.devices = std::vector<std::string>{};
  const JobState state = job->state;

  if (all_ok && state != JobState::kRestarting) {
    recorder_->Transition(a->job_id, JobState::kSucceeded,
                          "finished: all " + std::to_string(a->ranks.size()) + " rank(s) exited 0",
                          end);
    return false;
  }
  switch (state) {
    case JobState::kCancelling:
      recorder_->Transition(a->job_id, JobState::kCancelled, "cancelled by user", end);
      return false;
    case JobState::kPausing: {
      const std::string step = std::to_string(job->progress.last_checkpoint_step);
      std::string msg = "paused; resumes from checkpoint step " + step;
      if (!job->preempted_by.empty()) msg += " (preempted by " + job->preempted_by + ")";
      if (!a->failure.empty()) msg += " (" + a->failure + ")";
      auto paused = recorder_->Transition(a->job_id, JobState::kPaused, msg, end);
      if (paused.ok() && !job->preempted_by.empty()) {
        // A preempted job goes back to the queue by itself, behind the job that took its place.
        recorder_->Transition(a->job_id, JobState::kQueued,
                              "back in the queue after preemption by " + job->preempted_by +
                                  "; resumes from checkpoint step " + step,
                              {}, JobState::kPaused);
      }
      return false;
    }
    case JobState::kStarting:
    case JobState::kRunning: {
      if (a->failure.empty()) a->failure = summary, a->failure_class = ExitClass::kRetryable;
      if (a->failure_class == ExitClass::kFatal) {
        recorder_->Transition(a->job_id, JobState::kFailed,
                              a->failure + "; not retried. See " +
                                  JobLayout(job->job_dir).attempt_logs(a->attempt) + "/",
                              end);
        return false;
      }
      if (job->restarts >= job->max_restarts) {
        recorder_->Transition(a->job_id, JobState::kFailed,
                              a->failure + "; restarts exhausted (" +
                                  std::to_string(job->restarts) + "/" +
                                  std::to_string(job->max_restarts) + ")",
                              end);
        return false;
      }
      TransitionChanges keep;  // RESTARTING keeps its devices for the next attempt
      keep.end_attempt_reason = end.end_attempt_reason;
      auto r = recorder_->Transition(a->job_id, JobState::kRestarting,
                                     a->failure + "; restarting from the newest checkpoint (" +
                                         std::to_string(job->restarts + 1) + "/" +
                                         std::to_string(job->max_restarts) + ")",
                                     keep);
      if (!r.ok()) return false;
      a->ranks.clear();
      a->cluster_job.clear();
      a->teardown = false;
      a->killed = false;
      a->failure.clear();
      a->relaunch_at = now + options_.restart_backoff_seconds;
      return true;
    }
    case JobState::kRestarting:
      a->ranks.clear();
      if (a->relaunch_at == 0) a->relaunch_at = now;
      return true;
    default:
      return false;
  }
}

}  // namespace adctl
