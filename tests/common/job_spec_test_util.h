// What the job-spec tests share: a tiny valid spec and "this must not parse".
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/job_spec.h"

namespace adctl {

inline constexpr const char* kTiny = R"(
name: tiny-test
model:
  preset: tiny
data:
  kind: synthetic
  frames: 8
train:
  max_steps: 5
  lr: 3e-4
  betas: [0.8, 0.95]
)";

inline Status ParseError(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  Result<JobSpec> spec = ParseJobSpec(yaml, overrides);
  EXPECT_FALSE(spec.ok()) << "expected an error for:\n" << yaml;
  return spec.status();
}

}  // namespace adctl
