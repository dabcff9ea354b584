// What adctld can hand to ranks: GPUs found through NVML, or `--cpu-slots N` CPU slots.
//
// NVML is loaded with dlopen("libnvidia-ml.so.1") at run time, so adctld has no CUDA build or
// link dependency and runs unchanged on a CPU-only machine. Thread-compatible value types;
// `ProbeNvml` may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

struct Device {
  std::string name;   // what CUDA_VISIBLE_DEVICES gets ("0") or "cpu0" for a CPU slot
  std::string kind;   // "gpu" | "cpu"
  std::string model;  // "NVIDIA H200"
  std::string uuid;
  int64_t memory_total_bytes = 0;
  int64_t memory_used_bytes = 0;
};

// GPUs visible through NVML; Unavailable when the library or a driver is missing.
Result<std::vector<Device>> ProbeNvml();
// Refreshes memory use of GPUs (no-op for CPU slots or without NVML).
void RefreshNvmlMemory(std::vector<Device>* devices);
std::vector<Device> CpuSlots(int count);

}  // namespace adctl
