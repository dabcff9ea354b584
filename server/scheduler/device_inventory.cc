#include "server/scheduler/device_inventory.h"

namespace adctl {

Result<std::vector<Device>> ProbeNvml() {
  auto gpus = NvmlListGpus();
  if (!gpus.ok()) return gpus.status();
  std::vector<Device> out;
  for (const NvmlGpu& gpu : gpus.value()) {
    Device d;
    d.name = std::to_string(gpu.index);
    d.kind = "gpu";
    d.model = gpu.model;
    d.uuid = gpu.uuid;
    if (auto r = NvmlRead(gpu.index); r.ok()) d.reading = r.value();
    out.push_back(d);
  }
  return out;
}

void RefreshNvml(std::vector<Device>* devices) {
  for (Device& d : *devices) {
    if (d.kind != "gpu") continue;
    if (auto r = NvmlRead(static_cast<unsigned>(std::stoul(d.name))); r.ok()) d.reading = r.value();
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
