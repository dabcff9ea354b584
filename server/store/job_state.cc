#include "server/store/job_state.h"

#include <strings.h>

namespace adctl {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "QUEUED";
    case JobState::kStarting:
      return "STARTING";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kRestarting:
      return "RESTARTING";
    case JobState::kCancelling:
      return "CANCELLING";
    case JobState::kPausing:
      return "PAUSING";
    case JobState::kPaused:
      return "PAUSED";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
  }
  return "UNKNOWN";
}

std::optional<JobState> JobStateFromName(const std::string& name) {
  // Also the API's enum names (JOB_STATE_RUNNING), which `adctl -o json` prints.
  const char* bare = name.c_str();
  if (strncasecmp(bare, "JOB_STATE_", 10) == 0) bare += 10;
  for (JobState s : kAllJobStates) {
    if (strcasecmp(bare, JobStateName(s)) == 0) return s;
  }
  return std::nullopt;
}

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed ||
         state == JobState::kCancelled;
}

bool HasLiveAttempt(JobState state) {
  return state == JobState::kStarting || state == JobState::kRunning ||
         state == JobState::kRestarting || state == JobState::kCancelling ||
         state == JobState::kPausing;
}

namespace {

bool Allowed(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::kQueued:
      // QUEUED → FAILED: a job whose dependency (--after) ended other than as it asked.
      return to == S::kStarting || to == S::kPaused || to == S::kCancelled || to == S::kFailed;
    case S::kStarting:
    case S::kRunning:
      // STARTING → SUCCEEDED: a resumed job whose checkpoint is already at max_steps.
      return (from == S::kStarting && to == S::kRunning) || to == S::kSucceeded ||
             to == S::kFailed || to == S::kRestarting || to == S::kCancelling || to == S::kPausing;
    case S::kRestarting:
      return to == S::kStarting || to == S::kFailed || to == S::kCancelling ||
             to == S::kCancelled || to == S::kPaused;
    case S::kCancelling:
      return to == S::kCancelled || to == S::kSucceeded;
    case S::kPausing:
      // A rank that crashes while pausing still leaves the last committed checkpoint: PAUSED.
      return to == S::kPaused || to == S::kSucceeded || to == S::kCancelling || to == S::kFailed;
    case S::kPaused:
      return to == S::kQueued || to == S::kCancelled;
    case S::kSucceeded:
    case S::kFailed:
    case S::kCancelled:
      return false;
  }
  return false;
}

}  // namespace

Status CheckTransition(JobState from, JobState to) {
  if (Allowed(from, to)) return Status::Ok();
  return FailedPrecondition(std::string("job is ") + JobStateName(from) + ", cannot become " +
                            JobStateName(to));
}

}  // namespace adctl
