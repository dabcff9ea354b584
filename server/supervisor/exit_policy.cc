#include "server/supervisor/exit_policy.h"

#include "worker/exit_codes.h"

namespace adctl {

ExitClass ClassifyExit(const ExitStatus& exit) {
  if (exit.signal != 0) return ExitClass::kRetryable;
  switch (exit.exit_code) {
    case kExitOk:
      return ExitClass::kSuccess;
    case kExitPreempted:
      return ExitClass::kStopped;
    case kExitBadSpec:
    case kExitDataError:
    case kExitModelError:
      return ExitClass::kFatal;
    default:
      return ExitClass::kRetryable;  // kExitCrash, kExitTransient, unknown codes
  }
}

std::string DescribeExit(const ExitStatus& exit) {
  std::string text = exit.ToString();
  if (exit.signal != 0) return text;
  switch (exit.exit_code) {
    case kExitOk:
      return text + " (finished)";
    case kExitCrash:
      return text + " (crash)";
    case kExitBadSpec:
      return text + " (bad spec or command line)";
    case kExitDataError:
      return text + " (data missing or corrupt)";
    case kExitModelError:
      return text + " (model weights missing or corrupt)";
    case kExitPreempted:
      return text + " (stopped after checkpoint)";
    case kExitTransient:
      return text + " (rendezvous or communication failure)";
    case 127:
      return text + " (worker binary could not be executed)";
    default:
      return text;
  }
}

}  // namespace adctl
