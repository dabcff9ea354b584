#include "server/supervisor/options.h"

#include <algorithm>

namespace adctl {

std::string DeviceUnit(const std::vector<Device>& devices) {
  const bool any_gpu =
      std::any_of(devices.begin(), devices.end(), [](const Device& d) { return d.kind == "gpu"; });
  return any_gpu ? "GPU" : "CPU slot";
}

}  // namespace adctl
