// How a rank's exit maps to the job's outcome (docs/worker-contract.md, worker/exit_codes.h).
#pragma once

#include <string>

#include "server/launcher/process.h"

namespace adctl {

enum class ExitClass {
  kSuccess,    // 0
  kStopped,    // 75: stop honoured, checkpoint committed
  kRetryable,  // 1, 76, other codes, killed by a signal
  kFatal,      // 2, 3, 4: the same attempt would fail again
};

ExitClass ClassifyExit(const ExitStatus& exit);
// "exited with code 2 (bad spec or command line)".
std::string DescribeExit(const ExitStatus& exit);

}  // namespace adctl
