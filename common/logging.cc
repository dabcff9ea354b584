#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <utility>

namespace adctl {

Result<int> ParseLogLevel(const std::string& level) {
  std::string l = level;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  static const std::pair<const char*, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace},       {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},         {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn},      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off}};
  for (const auto& [name, value] : kLevels) {
    if (l == name) return static_cast<int>(value);
  }
  return InvalidArgument(
      "log level: must be one of trace, debug, info, warn, error, critical, "
      "off, got '" +
      level + "'");
}

void SetupLogging(const std::string& component, const std::string& level) {
  std::string wanted = level;
  if (wanted.empty()) {
    const char* env = std::getenv("ADCTL_LOG_LEVEL");
    wanted = env != nullptr ? env : "";
  }
  if (wanted.empty()) wanted = "info";
  Result<int> parsed = ParseLogLevel(wanted);

  // Not registered under its own name, so SetupLogging may run again (tests, re-configuration).
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(component, std::move(sink)));
  std::string escaped;  // '%' in the component must not start a pattern flag
  for (char c : component) escaped += c == '%' ? std::string("%%") : std::string(1, c);
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-7l%$ [" + escaped + "] %v");
  spdlog::set_level(parsed.ok() ? static_cast<spdlog::level::level_enum>(parsed.value())
                                : spdlog::level::info);
  spdlog::flush_on(spdlog::level::warn);
  if (!parsed.ok()) spdlog::warn("{}; using info", parsed.status().message());
}

}  // namespace adctl
