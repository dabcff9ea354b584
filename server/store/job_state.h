// The job state machine. The enum's comment is the spec; `CheckTransition` is the only place
// that decides which moves are legal (tests/server/job_state_test.cc checks every pair).
//
//   QUEUED ─────→ STARTING ─→ RUNNING ─→ SUCCEEDED
//     │  │           │ │ │      │ │ │
//     │  │           │ │ │      │ │ └──→ FAILED      non-retryable exit, or restarts used up
//     │  │           │ │ └──────┼─┴────→ RESTARTING  retryable exit: attempt torn down, then
//     │  │           │ │        │          │           STARTING with attempt+1 (or FAILED when
//     │  │           │ │        │          │           the relaunch fails)
//     │  │           │ └────────┴────────→ CANCELLING → CANCELLED (or SUCCEEDED if the ranks
//     │  │           └─────────────────→ PAUSING → PAUSED       finished first)
//     │  └──(pause while queued)───────────────────→ PAUSED ─(resume)→ QUEUED
//     └──(cancel while queued / paused / restarting without processes)→ CANCELLED
//
// Terminal states (SUCCEEDED, FAILED, CANCELLED) have no way out. PAUSED is not terminal: it
// holds no resources and waits for a resume or a cancel. Values match adctl.v1.JobState.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace adctl {

enum class JobState {
  kQueued = 1,
  kStarting = 2,
  kRunning = 3,
  kRestarting = 4,
  kCancelling = 5,
  kPausing = 6,
  kPaused = 7,
  kSucceeded = 8,
  kFailed = 9,
  kCancelled = 10,
};

constexpr JobState kAllJobStates[] = {
    JobState::kQueued,     JobState::kStarting,  JobState::kRunning, JobState::kRestarting,
    JobState::kCancelling, JobState::kPausing,   JobState::kPaused,  JobState::kSucceeded,
    JobState::kFailed,     JobState::kCancelled,
};

// "RUNNING".
const char* JobStateName(JobState state);
// Case-insensitive; "RUNNING" and the API's "JOB_STATE_RUNNING" both name kRunning.
std::optional<JobState> JobStateFromName(const std::string& name);
bool IsTerminal(JobState state);
// States in which processes of an attempt may be alive.
bool HasLiveAttempt(JobState state);

// Ok when `from → to` is a legal move; FailedPrecondition naming both states otherwise.
Status CheckTransition(JobState from, JobState to);

}  // namespace adctl
