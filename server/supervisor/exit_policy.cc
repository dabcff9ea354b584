#include "server/supervisor/exit_policy.h"

namespace adctl {

ExitClass ClassifyExit(const ExitStatus& exit) {
  if (exit.signal != 0) return ExitClass::kRetryable;
  return ClassifyExitCode(exit.exit_code);
}

std::string DescribeExit(const ExitStatus& exit) {
  std::string text = exit.ToString();
  if (exit.signal != 0) return text;
  const std::string description = DescribeExitCode(exit.exit_code);
  return description.empty() ? text : text + " (" + description + ")";
}

}  // namespace adctl
