// Which queued job gets which devices next: strict priority, FIFO within a priority.
//
// Pure function over a snapshot, so it is tested without processes or a socket. No backfill:
// a job that does not fit blocks the jobs behind it (they would otherwise starve a large job),
// and every waiting job gets a one-line reason for `adctl describe`.
//
// Preemption: when the first job that does not fit has a higher priority than running
// preemptible jobs whose devices would make it fit, those jobs are named to be paused for it
// (lowest priority first, newest first within a priority, only as many as it needs). A job
// already stopping is not named again; its devices count as coming free. A preempted job
// queued again may start on fewer ranks (`shrink_to`) when that is what is free.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace adctl {

struct QueuedJob {
  QueuedJob(std::string id, int gpus, int priority, int64_t seq, std::vector<int> shrink_to = {})
      : id(std::move(id)),
        gpus(gpus),
        priority(priority),
        seq(seq),
        shrink_to(std::move(shrink_to)) {}
  std::string id;
  int gpus = 1;
  int priority = 0;
  int64_t seq = 0;  // submission order
  // Smaller rank counts it may start on instead, largest first (a preempted job with
  // resources.allow_shrink whose global batch divides); empty: gpus only.
  std::vector<int> shrink_to;
};

// A job holding devices of this host.
struct RunningJob {
  std::string id;
  int priority = 0;
  int64_t seq = 0;
  bool preemptible = false;
  bool stopping = false;  // pausing, cancelling or ending: its devices come free by themselves
  std::vector<std::string> devices;
};

struct Placement {
  std::string job_id;
  std::vector<std::string> devices;  // fewer than the job's gpus when it shrank
};

struct Preemption {
  std::string victim;  // a running preemptible job to pause
  std::string by;      // the queued job it makes room for
};

struct ScheduleDecision {
  std::vector<Placement> placements;
  std::vector<Preemption> preemptions;
  std::map<std::string, std::string> wait_reasons;  // job id → why it waits
};

// `devices`: all device names in order; `busy`: device → holding job id. `unit` names a device
// in messages ("GPU" or "CPU slot"). `running`: the jobs holding busy devices (preemption).
ScheduleDecision Schedule(const std::vector<std::string>& devices,
                          const std::map<std::string, std::string>& busy,
                          std::vector<QueuedJob> queued, const std::string& unit,
                          const std::vector<RunningJob>& running = {});

}  // namespace adctl
