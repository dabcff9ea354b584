// What adctld can hand to ranks: GPUs found through NVML (common/nvml.h, loaded at run time, so
// adctld runs unchanged on a CPU-only machine), or `--cpu-slots N` CPU slots. Thread-compatible
// value types; the functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/nvml.h"
#include "common/status.h"

namespace adctl {

struct Device {
  std::string name;   // what CUDA_VISIBLE_DEVICES gets ("0", the NVML index) or "cpu0"
  std::string kind;   // "gpu" | "cpu"
  std::string model;  // "NVIDIA H200"
  std::string uuid;
  // The last NVML sample (RefreshNvml); all negative for CPU slots, which have none.
  DeviceReading reading;
};

// GPUs visible through NVML, sampled once; Unavailable when the library or a driver is missing.
Result<std::vector<Device>> ProbeNvml();
// Samples the GPUs again (utilisation, memory, power, temperature, SM clock); CPU slots and a
// machine without NVML are left as they are.
void RefreshNvml(std::vector<Device>* devices);
std::vector<Device> CpuSlots(int count);

}  // namespace adctl
