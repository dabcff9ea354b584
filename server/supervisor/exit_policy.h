// How a rank's exit maps to the job's outcome: the worker contract's exit-code table
// (common/worker_contract.h) applied to how the process ended (a signal is always retryable).
#pragma once

#include <string>

#include "common/worker_contract.h"
#include "server/launcher/process.h"

namespace adctl {

ExitClass ClassifyExit(const ExitStatus& exit);
// "exited with code 2 (bad spec or command line)".
std::string DescribeExit(const ExitStatus& exit);

}  // namespace adctl
