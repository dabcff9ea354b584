// NVIDIA's management library, loaded with dlopen("libnvidia-ml.so.1") at run time: adctld and
// the CPU build of adworker have no CUDA build or link dependency and run unchanged on a machine
// without a driver (every call then answers Unavailable). Torch-free; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

// One sample of a device. Negative: not measured (the kind of device has no such number, or
// the driver does not report it) — never a guessed value.
struct DeviceReading {
  double utilization = -1;  // busy share of NVML's last sample period (0..1)
  int64_t memory_used_bytes = -1;
  int64_t memory_total_bytes = -1;
  double power_watts = -1;
  double temperature_celsius = -1;  // the GPU die
  double sm_clock_hertz = -1;
};

struct NvmlGpu {
  unsigned index = 0;  // NVML's index: PCI bus order (CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID)
  std::string model;   // "NVIDIA H200"
  std::string uuid;    // "GPU-…"
};

// The GPUs NVML lists; Unavailable without a driver.
Result<std::vector<NvmlGpu>> NvmlListGpus();
// The NVML index of the GPU with this UUID.
Result<unsigned> NvmlIndexOfUuid(const std::string& uuid);
// Utilisation, memory, power, temperature and SM clock of GPU `index` now.
Result<DeviceReading> NvmlRead(unsigned index);

}  // namespace adctl
