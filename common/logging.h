// Logging setup for adctld, adworker and adctl (spdlog).
//
// Every process calls SetupLogging once at start, before starting threads. Lines go to stderr
// (the launcher captures a rank's stderr into <job-dir>/logs/attempt-A/rank-R.log):
//
//   2026-11-30 06:15:03.123 info    [adworker r0] step 10 loss 0.1234
#pragma once

#include <string>

#include "common/status.h"

namespace adctl {

// Sets spdlog's default logger: stderr, pattern "<date time.ms> <level> [component] message",
// colour only on a terminal, flush on warnings. `level` is one of trace, debug, info, warn,
// error, critical, off; "" means the environment variable ADCTL_LOG_LEVEL, else "info". An
// unknown level logs a warning and uses info.
void SetupLogging(const std::string& component, const std::string& level = "");

// "debug" → spdlog level number (spdlog::level::level_enum); InvalidArgument on other names.
Result<int> ParseLogLevel(const std::string& level);

}  // namespace adctl
