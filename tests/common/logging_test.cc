#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace adctl {
namespace {

TEST(LoggingTest, ParseLogLevel) {
  EXPECT_EQ(ParseLogLevel("debug").value(), spdlog::level::debug);
  EXPECT_EQ(ParseLogLevel("WARNING").value(), spdlog::level::warn);
  EXPECT_EQ(ParseLogLevel("off").value(), spdlog::level::off);
  EXPECT_EQ(ParseLogLevel("loud").status().code(), StatusCode::kInvalidArgument);
}

TEST(LoggingTest, LevelFromArgumentThenEnvironment) {
  SetupLogging("adctld", "debug");
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);

  ::setenv("ADCTL_LOG_LEVEL", "error", 1);
  SetupLogging("adworker r0", "");
  EXPECT_EQ(spdlog::get_level(), spdlog::level::err);
  SetupLogging("adworker r0", "trace");  // the argument wins over the environment
  EXPECT_EQ(spdlog::get_level(), spdlog::level::trace);
  ::unsetenv("ADCTL_LOG_LEVEL");

  SetupLogging("100%", "nonsense");  // unknown level: info, and a '%' in the component is fine
  EXPECT_EQ(spdlog::get_level(), spdlog::level::info);
  testing::internal::CaptureStderr();
  spdlog::info("hello {}", 1);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[100%] hello 1"), std::string::npos) << err;
  EXPECT_NE(err.find(" info "), std::string::npos) << err;
}

}  // namespace
}  // namespace adctl
