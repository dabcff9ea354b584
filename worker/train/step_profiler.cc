#include "worker/train/step_profiler.h"

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#if defined(ADCTL_WITH_CUDA)
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace adctl {

namespace {

#if defined(ADCTL_WITH_CUDA)
namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// The operators too (with their input shapes): bench/profile-summary attributes each kernel to
// the operator chain that launched it.
const std::set<ActivityType> kActivities = {ActivityType::CPU, ActivityType::CUDA};
#endif

}  // namespace

std::unique_ptr<StepProfiler> StepProfiler::FromEnvironment(int rank, std::string* message) {
  const char* steps = std::getenv("ADCTL_PROFILE_STEPS");
  if (steps == nullptr || rank != 0) return nullptr;
  const char* trace = std::getenv("ADCTL_PROFILE_TRACE");
  long long first = 0, count = 0;
  char rest = 0;
  if (std::sscanf(steps, "%lld:%lld%c", &first, &count, &rest) != 2 || first < 1 || count < 1 ||
      trace == nullptr || *trace == '\0') {
    *message = std::string("ADCTL_PROFILE_STEPS='") + steps +
               "' ignored: expected FIRST:COUNT (steps from 1) and ADCTL_PROFILE_TRACE=PATH";
    return nullptr;
  }
#if defined(ADCTL_WITH_CUDA)
  *message = "profiling the GPU kernels of steps " + std::to_string(first) + "-" +
             std::to_string(first + count - 1) + " into " + trace;
  return std::make_unique<StepProfiler>(first, count, trace);
#else
  *message = "ADCTL_PROFILE_STEPS ignored: the kernel profile needs adworker's CUDA build";
  return nullptr;
#endif
}

StepProfiler::StepProfiler(int64_t first, int64_t count, std::string path)
    : first_(first), count_(count), path_(std::move(path)) {}

StepProfiler::~StepProfiler() {
#if defined(ADCTL_WITH_CUDA)
  if (active_) kineto::disableProfiler();
#endif
}

void StepProfiler::BeforeStep(int64_t step) {
#if defined(ADCTL_WITH_CUDA)
  if (step != first_ || active_) return;
  torch::cuda::synchronize();  // the earlier steps' kernels stay out of the trace
  const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/true);
  kineto::prepareProfiler(config, kActivities);
  kineto::enableProfiler(config, kActivities);
  active_ = true;
#else
  (void)step;
#endif
}

std::optional<std::string> StepProfiler::AfterStep(int64_t step) {
#if defined(ADCTL_WITH_CUDA)
  if (!active_ || step != first_ + count_ - 1) return std::nullopt;
  torch::cuda::synchronize();
  active_ = false;
  try {
    auto result = kineto::disableProfiler();
    result->save(path_);
  } catch (const std::exception& e) {
    return "kernel profile not written to " + path_ + ": " + e.what();
  }
  return "kernel profile of steps " + std::to_string(first_) + "-" + std::to_string(step) +
         " written to " + path_;
#else
  (void)step;
  return std::nullopt;
#endif
}

}  // namespace adctl
