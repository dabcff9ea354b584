#include "server/scheduler/scheduler.h"

#include <algorithm>

namespace adctl {

namespace {

std::string Plural(int n, const std::string& unit) {
  return std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
}

}  // namespace

ScheduleDecision Schedule(const std::vector<std::string>& devices,
                          const std::map<std::string, std::string>& busy,
                          std::vector<QueuedJob> queued, const std::string& unit) {
  std::stable_sort(queued.begin(), queued.end(), [](const QueuedJob& a, const QueuedJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.seq < b.seq;
  });
  std::vector<std::string> free;
  for (const auto& d : devices) {
    if (!busy.count(d)) free.push_back(d);
  }
  ScheduleDecision out;
  const QueuedJob* blocker = nullptr;
  for (const QueuedJob& job : queued) {
    if (blocker) {
      out.wait_reasons[job.id] = "queued behind " + blocker->id + " (priority " +
                                 std::to_string(blocker->priority) + ", waiting for " +
                                 Plural(blocker->gpus, unit) + ")";
      continue;
    }
    if (job.gpus > static_cast<int>(devices.size())) {
      // Cannot ever run here; submit refuses this, but a coordinator restarted with fewer
      // devices can still hold such a job. Do not let it block the queue.
      out.wait_reasons[job.id] = "needs " + Plural(job.gpus, unit) + " but this coordinator has " +
                                 std::to_string(devices.size());
      continue;
    }
    if (job.gpus <= static_cast<int>(free.size())) {
      Placement p;
      p.job_id = job.id;
      p.devices.assign(free.begin(), free.begin() + job.gpus);
      free.erase(free.begin(), free.begin() + job.gpus);
      out.placements.push_back(p);
      continue;
    }
    std::set<std::string> holders;
    for (const auto& [device, holder] : busy) holders.insert(holder);
    for (const auto& p : out.placements) holders.insert(p.job_id);
    std::string held;
    for (const auto& h : holders) held += (held.empty() ? "" : ", ") + h;
    out.wait_reasons[job.id] = "waiting for " + Plural(job.gpus, unit) + ": " +
                               std::to_string(free.size()) + " free" +
                               (held.empty() ? "" : ", in use by " + held);
    blocker = &job;
  }
  return out;
}

}  // namespace adctl
