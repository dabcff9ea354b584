#include "common/nvml.h"

#include <dlfcn.h>

#include <mutex>

namespace adctl {

namespace {

// The NVML entry points used here (nvml.h; stable ABI since NVML 10).
typedef struct nvmlDevice_st* nvmlDevice_t;
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the sample period a kernel ran
  unsigned int memory;  // percent of it the memory was read or written
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM

struct Nvml {
  bool ok = false;
  std::string error;
  int (*get_count)(unsigned int*) = nullptr;
  int (*get_handle)(unsigned int, nvmlDevice_t*) = nullptr;
  int (*get_handle_by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  int (*get_index)(nvmlDevice_t, unsigned int*) = nullptr;
  int (*get_name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  int (*get_uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  int (*get_memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  // Optional: a driver without them still lists devices and memory.
  int (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  int (*get_power)(nvmlDevice_t, unsigned int*) = nullptr;  // milliwatts
  int (*get_temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  int (*get_clock)(nvmlDevice_t, int, unsigned int*) = nullptr;  // MHz
};

template <typename Fn>
void Bind(void* lib, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
}

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
    int (*init)() = nullptr;
    Bind(lib, "nvmlInit_v2", &init);
    Bind(lib, "nvmlDeviceGetCount_v2", &nvml.get_count);
    Bind(lib, "nvmlDeviceGetHandleByIndex_v2", &nvml.get_handle);
    Bind(lib, "nvmlDeviceGetHandleByUUID", &nvml.get_handle_by_uuid);
    Bind(lib, "nvmlDeviceGetIndex", &nvml.get_index);
    Bind(lib, "nvmlDeviceGetName", &nvml.get_name);
    Bind(lib, "nvmlDeviceGetUUID", &nvml.get_uuid);
    Bind(lib, "nvmlDeviceGetMemoryInfo", &nvml.get_memory);
    Bind(lib, "nvmlDeviceGetUtilizationRates", &nvml.get_utilization);
    Bind(lib, "nvmlDeviceGetPowerUsage", &nvml.get_power);
    Bind(lib, "nvmlDeviceGetTemperature", &nvml.get_temperature);
    Bind(lib, "nvmlDeviceGetClockInfo", &nvml.get_clock);
    if (!init || !nvml.get_count || !nvml.get_handle || !nvml.get_handle_by_uuid ||
        !nvml.get_index || !nvml.get_name || !nvml.get_uuid || !nvml.get_memory) {
      nvml.error = "libnvidia-ml.so.1 lacks the expected symbols";
      return;
    }
    const int rc = init();
    if (rc != kNvmlSuccess) {
      nvml.error = "nvmlInit failed with code " + std::to_string(rc);
      return;
    }
    nvml.ok = true;
  });
  return nvml;
}

Result<nvmlDevice_t> Handle(const Nvml& nvml, unsigned index) {
  nvmlDevice_t handle = nullptr;
  if (nvml.get_handle(index, &handle) != kNvmlSuccess) {
    return NotFound("NVML has no GPU " + std::to_string(index));
  }
  return handle;
}

}  // namespace

Result<std::vector<NvmlGpu>> NvmlListGpus() {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok) return Unavailable(nvml.error);
  unsigned int count = 0;
  if (nvml.get_count(&count) != kNvmlSuccess) return Unavailable("nvmlDeviceGetCount failed");
  std::vector<NvmlGpu> out;
  for (unsigned int i = 0; i < count; ++i) {
    auto handle = Handle(nvml, i);
    if (!handle.ok()) continue;
    NvmlGpu gpu;
    gpu.index = i;
    char name[256] = {0};
    if (nvml.get_name(handle.value(), name, sizeof(name)) == kNvmlSuccess) gpu.model = name;
    char uuid[128] = {0};
    if (nvml.get_uuid(handle.value(), uuid, sizeof(uuid)) == kNvmlSuccess) gpu.uuid = uuid;
    out.push_back(gpu);
  }
  return out;
}

Result<unsigned> NvmlIndexOfUuid(const std::string& uuid) {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok) return Unavailable(nvml.error);
  nvmlDevice_t handle = nullptr;
  unsigned int index = 0;
  if (nvml.get_handle_by_uuid(uuid.c_str(), &handle) != kNvmlSuccess ||
      nvml.get_index(handle, &index) != kNvmlSuccess) {
    return NotFound("NVML has no GPU " + uuid);
  }
  return index;
}

Result<DeviceReading> NvmlRead(unsigned index) {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok) return Unavailable(nvml.error);
  auto handle = Handle(nvml, index);
  if (!handle.ok()) return handle.status();
  nvmlDevice_t h = handle.value();
  DeviceReading r;
  nvmlMemory_t mem{};
  if (nvml.get_memory(h, &mem) == kNvmlSuccess) {
    r.memory_used_bytes = static_cast<int64_t>(mem.used);
    r.memory_total_bytes = static_cast<int64_t>(mem.total);
  }
  nvmlUtilization_t util{};
  if (nvml.get_utilization && nvml.get_utilization(h, &util) == kNvmlSuccess) {
    r.utilization = util.gpu / 100.0;
  }
  unsigned int value = 0;
  if (nvml.get_power && nvml.get_power(h, &value) == kNvmlSuccess) r.power_watts = value / 1000.0;
  if (nvml.get_temperature &&
      nvml.get_temperature(h, kNvmlTemperatureGpu, &value) == kNvmlSuccess) {
    r.temperature_celsius = value;
  }
  if (nvml.get_clock && nvml.get_clock(h, kNvmlClockSm, &value) == kNvmlSuccess) {
    r.sm_clock_hertz = value * 1e6;
  }
  return r;
}

}  // namespace adctl
