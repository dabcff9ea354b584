#include "worker/report/device_sampler.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

namespace adctl {

namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return -1;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

int64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  if (pages <= 0) return -1;
  return static_cast<int64_t>(pages) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

ProcessUsage ProcessUsageNow() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return {};
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return {seconds(u.ru_utime) + seconds(u.ru_stime), u.ru_majflt};
}

std::optional<unsigned> NvmlIndexOfVisibleDevice(const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) return std::nullopt;
  std::string first = cuda_visible_devices;
  first = first.substr(0, first.find(','));
  if (first.empty()) return std::nullopt;
  if (first.rfind("GPU-", 0) == 0) {
    auto index = NvmlIndexOfUuid(first);
    if (!index.ok()) return std::nullopt;
    return index.value();
  }
  if (!std::all_of(first.begin(), first.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return static_cast<unsigned>(std::stoul(first));
}

DeviceSampler::DeviceSampler(bool cuda, int threads) : cuda_(cuda), threads_(std::max(1, threads)) {
  if (cuda_) nvml_index_ = NvmlIndexOfVisibleDevice(std::getenv("CUDA_VISIBLE_DEVICES"));
  if (!cuda_) {
    last_cpu_seconds_ = ProcessUsageNow().cpu_seconds;
    last_wall_ = std::chrono::steady_clock::now();
  }
}

DeviceReading DeviceSampler::Sample() {
  if (!cuda_) return SampleCpu();
  if (!nvml_index_) return {};
  auto r = NvmlRead(*nvml_index_);
  return r.ok() ? r.value() : DeviceReading{};
}

DeviceReading DeviceSampler::SampleCpu() {
  DeviceReading r;
  const double cpu = ProcessUsageNow().cpu_seconds;
  const auto now = std::chrono::steady_clock::now();
  const double wall = std::chrono::duration<double>(now - last_wall_).count();
  if (cpu >= 0 && last_cpu_seconds_ >= 0 && wall > 0) {
    r.utilization = std::clamp((cpu - last_cpu_seconds_) / (wall * threads_), 0.0, 1.0);
  }
  last_cpu_seconds_ = cpu;
  last_wall_ = now;
  r.memory_used_bytes = ResidentBytes();
  r.memory_total_bytes = HostMemoryBytes();
  return r;
}

}  // namespace adctl
