// What a rank's device is doing, sampled with each step report (docs/metrics.md, "GPU series").
//
// A GPU rank reads NVML (common/nvml.h) for the GPU that CUDA_VISIBLE_DEVICES names — an NVML
// index ("3", adctld's device names, with CUDA_DEVICE_ORDER=PCI_BUS_ID) or a UUID ("GPU-…").
// A CPU rank reports what is meaningful for a CPU slot: the share of its threads' time the
// process spent on a CPU since the last sample, its resident memory and the host's memory.
// Power, temperature and clocks of a CPU slot are not measured (left negative), never faked.
// Torch-free; one thread at a time.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/nvml.h"

namespace adctl {

class DeviceSampler {
 public:
  // `cuda`: the rank trains on a GPU; `threads`: the compute threads of a CPU rank (the
  // denominator of its utilisation).
  DeviceSampler(bool cuda, int threads);

  DeviceReading Sample();
  // The NVML index read, when the rank's GPU was found there.
  std::optional<unsigned> nvml_index() const { return nvml_index_; }

 private:
  DeviceReading SampleCpu();

  const bool cuda_;
  const int threads_;
  std::optional<unsigned> nvml_index_;
  // The previous CPU sample: process CPU seconds and its wall time.
  double last_cpu_seconds_ = -1;
  std::chrono::steady_clock::time_point last_wall_;
};

// This process's CPU seconds (user + system; -1 where unreadable) and major page faults (pages
// read from disk) so far.
struct ProcessUsage {
  double cpu_seconds = -1;
  long major_faults = 0;
};
ProcessUsage ProcessUsageNow();

// The GPU that CUDA_VISIBLE_DEVICES' first entry names, as an NVML index; nullopt when the
// variable is unset/empty or NVML does not know it.
std::optional<unsigned> NvmlIndexOfVisibleDevice(const char* cuda_visible_devices);

}  // namespace adctl
