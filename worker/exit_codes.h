// adworker's exit codes: the contract between a rank and the coordinator's supervisor.
// Documented in README.md ("Worker exit codes"); server/ maps them to job outcomes.
#pragma once

namespace adctl {

constexpr int kExitOk = 0;          // training finished, final checkpoint committed
constexpr int kExitCrash = 1;       // unexpected error (bug, OOM, ...): retryable
constexpr int kExitBadSpec = 2;     // invalid spec or command line: never retried
constexpr int kExitDataError = 3;   // dataset missing/corrupt: never retried
constexpr int kExitModelError = 4;  // weights missing/mis-shaped/corrupt: never retried
constexpr int kExitPreempted = 75;  // stop requested; checkpoint committed; resumable
constexpr int kExitTransient = 76;  // rendezvous/communication failure: retryable

}  // namespace adctl
