// The coordinator's settings (adctld's flags), shared by its parts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/notify/webhooks.h"
#include "server/scheduler/device_inventory.h"
#include "server/supervisor/path_policy.h"

namespace adctl {

struct SupervisorOptions {
  std::string data_dir;             // jobs/<id>/ live here
  std::string worker_binary;        // absolute path to adworker
  std::string coordinator_address;  // what ranks dial ("127.0.0.1:50051")
  std::vector<Device> devices;
  int heartbeat_interval_ms = 1000;
  // Metric points kept per job and rank (--metrics-max-points); 0: every point. Also bounds a
  // flood: the hub thins as the points come, not only on adctld's minute timer.
  int64_t metrics_max_points = 0;
  double restart_backoff_seconds = 1.0;
  int tick_ms = 100;
  PathRoots paths;     // which files a job may name (--read-root, --write-root)
  std::string tls_ca;  // handed to ranks (ADCTL_TLS_CA) when adctld serves TLS
  // Network of multi-node ranks: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (--worker-ifname) and
  // more environment for every rank (--worker-env K=V), both unless the operator's environment
  // already sets the variable.
  std::string worker_ifname;
  std::vector<std::pair<std::string, std::string>> worker_env;
  // Who is told when jobs end or have samples (--webhook, --webhook-secret-file, ...).
  WebhookOptions webhooks;
};

// "GPU" when any device is a GPU, else "CPU slot": the unit messages count devices in.
std::string DeviceUnit(const std::vector<Device>& devices);

}  // namespace adctl
