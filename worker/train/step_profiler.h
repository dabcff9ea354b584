// A kernel profile of a few training steps, for the GPU benchmarks (bench/engine-bench's
// `profile` option): with ADCTL_PROFILE_STEPS=FIRST:COUNT and ADCTL_PROFILE_TRACE=PATH in a
// worker's environment, rank 0 records the GPU kernels and the operators (with input shapes) that
// launched them in steps FIRST … FIRST+COUNT−1 with LibTorch's profiler (Kineto/CUPTI) and
// writes them to PATH as a Chrome trace;
// bench/profile-summary groups them into the table of bench/results/. The CUDA build only (the
// kernels are what it is for); elsewhere the variables are refused with a message.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace adctl {

class StepProfiler {
 public:
  // Null without ADCTL_PROFILE_STEPS, or off rank 0. `message` says what was set up or why the
  // variables are ignored (malformed, or not a CUDA build).
  static std::unique_ptr<StepProfiler> FromEnvironment(int rank, std::string* message);

  StepProfiler(int64_t first, int64_t count, std::string path);
  ~StepProfiler();

  // Around each step (1-based: the step about to run, the step just finished). AfterStep
  // returns a message once the trace is written (or failed to be).
  void BeforeStep(int64_t step);
  std::optional<std::string> AfterStep(int64_t step);

 private:
  int64_t first_, count_;
  std::string path_;
  bool active_ = false;
};

}  // namespace adctl
