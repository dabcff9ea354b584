#include "server/supervisor/job_recorder.h"

#include <spdlog/spdlog.h>

namespace adctl {

Result<JobRecord> JobRecorder::Transition(const std::string& job_id, JobState to,
                                          const std::string& message,
                                          const TransitionChanges& changes,
                                          std::optional<JobState> expected_from) {
  auto job = store_->Transition(job_id, expected_from, to, message, changes);
  if (job.ok()) {
    spdlog::info("job {}: {} ({})", job_id, JobStateName(to), message);
    if (IsTerminal(to)) {
      specs_.Forget(job_id);
      if (observer_) observer_->OnJobFinished(job_id, to);
    }
    changes_->Notify();
  } else {
    spdlog::warn("job {}: transition to {} refused: {}", job_id, JobStateName(to),
                 job.status().ToString());
  }
  return job;
}

Status JobRecorder::AddEvent(const std::string& job_id, int attempt, const std::string& kind,
                             const std::string& level, const std::string& message) {
  EventRecord e;
  e.job_id = job_id;
  e.attempt = attempt;
  e.kind = kind;
  e.level = level;
  e.message = message;
  auto id = store_->AddEvent(e);
  if (!id.ok()) {
    spdlog::warn("job {}: cannot record event '{}': {}", job_id, message, id.status().ToString());
    return id.status();
  }
  changes_->Notify();
  return Status::Ok();
}

}  // namespace adctl
