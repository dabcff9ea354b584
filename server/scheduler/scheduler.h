// Which queued job gets which devices next: strict priority, FIFO within a priority.
//
// Pure function over a snapshot, so it is tested without processes or a socket. No backfill:
// a job that does not fit blocks the jobs behind it (they would otherwise starve a large job),
// and every waiting job gets a one-line reason for `adctl describe`.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace adctl {

struct QueuedJob {
  std::string id;
  int gpus = 1;
  int priority = 0;
  int64_t seq = 0;  // submission order
};

struct Placement {
  std::string job_id;
  std::vector<std::string> devices;
};

struct ScheduleDecision {
  std::vector<Placement> placements;
  std::map<std::string, std::string> wait_reasons;  // job id → why it waits
};

// `devices`: all device names in order; `busy`: device → holding job id. `unit` names a device
// in messages ("GPU" or "CPU slot").
ScheduleDecision Schedule(const std::vector<std::string>& devices,
                          const std::map<std::string, std::string>& busy,
                          std::vector<QueuedJob> queued, const std::string& unit);

}  // namespace adctl
