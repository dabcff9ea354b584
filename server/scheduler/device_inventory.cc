#include "server/scheduler/device_inventory.h"

#include <dlfcn.h>

#include <mutex>

namespace adctl {

namespace {

// The few NVML entry points used here (nvml.h, stable ABI since NVML 10).
typedef struct nvmlDevice_st* nvmlDevice_t;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
using InitFn = int (*)();
using CountFn = int (*)(unsigned int*);
using HandleFn = int (*)(unsigned int, nvmlDevice_t*);
using StringFn = int (*)(nvmlDevice_t, char*, unsigned int);
using MemoryFn = int (*)(nvmlDevice_t, nvmlMemory_t*);

struct Nvml {
  bool ok = false;
  std::string error;
  CountFn get_count = nullptr;
  HandleFn get_handle = nullptr;
  StringFn get_name = nullptr;
  StringFn get_uuid = nullptr;
  MemoryFn get_memory = nullptr;
};

// Loaded once; never unloaded (NVML keeps threads).
const Nvml& LoadNvml() {
  static Nvml nvml;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      nvml.error = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
      return;
    }
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
    nvml.get_count = reinterpret_cast<CountFn>(dlsym(lib, "nvmlDeviceGetCount_v2"));
    nvml.get_handle = reinterpret_cast<HandleFn>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    nvml.get_name = reinterpret_cast<StringFn>(dlsym(lib, "nvmlDeviceGetName"));
    nvml.get_uuid = reinterpret_cast<StringFn>(dlsym(lib, "nvmlDeviceGetUUID"));
    nvml.get_memory = reinterpret_cast<MemoryFn>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    if (!init || !nvml.get_count || !nvml.get_handle || !nvml.get_name || !nvml.get_uuid ||
        !nvml.get_memory) {
      nvml.error = "libnvidia-ml.so.1 lacks the expected symbols";
      return;
    }
    int rc = init();
    if (rc != 0) {
      nvml.error = "nvmlInit failed with code " + std::to_string(rc);
      return;
    }
    nvml.ok = true;
  });
  return nvml;
}

}  // namespace

Result<std::vector<Device>> ProbeNvml() {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok) return Unavailable(nvml.error);
  unsigned int count = 0;
  if (nvml.get_count(&count) != 0) return Unavailable("nvmlDeviceGetCount failed");
  std::vector<Device> out;
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t handle = nullptr;
    if (nvml.get_handle(i, &handle) != 0) continue;
    Device d;
    d.name = std::to_string(i);
    d.kind = "gpu";
    char buf[256] = {0};
    if (nvml.get_name(handle, buf, sizeof(buf)) == 0) d.model = buf;
    char uuid[128] = {0};
    if (nvml.get_uuid(handle, uuid, sizeof(uuid)) == 0) d.uuid = uuid;
    nvmlMemory_t mem{};
    if (nvml.get_memory(handle, &mem) == 0) {
      d.memory_total_bytes = static_cast<int64_t>(mem.total);
      d.memory_used_bytes = static_cast<int64_t>(mem.used);
    }
    out.push_back(d);
  }
  return out;
}

void RefreshNvmlMemory(std::vector<Device>* devices) {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok) return;
  for (Device& d : *devices) {
    if (d.kind != "gpu") continue;
    nvmlDevice_t handle = nullptr;
    if (nvml.get_handle(static_cast<unsigned>(std::stoul(d.name)), &handle) != 0) continue;
    nvmlMemory_t mem{};
    if (nvml.get_memory(handle, &mem) == 0) d.memory_used_bytes = static_cast<int64_t>(mem.used);
  }
}

std::vector<Device> CpuSlots(int count) {
  std::vector<Device> out;
  for (int i = 0; i < count; ++i) {
    Device d;
    d.name = "cpu" + std::to_string(i);
    d.kind = "cpu";
    d.model = "CPU slot";
    out.push_back(d);
  }
  return out;
}

}  // namespace adctl
