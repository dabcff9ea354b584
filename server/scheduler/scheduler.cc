#include "server/scheduler/scheduler.h"

#include <algorithm>
#include <cstddef>

namespace adctl {

namespace {

std::string Plural(int n, const std::string& unit) {
  return std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
}

// The running jobs to pause so that `job` fits: preemptible, of a lower priority, lowest
// priority first and newest first within one, only as many as it needs. Empty when even all of
// them would not make room (or when jobs already stopping will). `coming`: devices that jobs
// already stopping will free.
std::vector<const RunningJob*> ChooseVictims(const QueuedJob& job, size_t free, size_t coming,
                                             const std::vector<RunningJob>& running) {
  if (free + coming >= static_cast<size_t>(job.gpus)) return {};
  std::vector<const RunningJob*> candidates;
  for (const RunningJob& r : running) {
    if (r.preemptible && !r.stopping && r.priority < job.priority) candidates.push_back(&r);
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const RunningJob* a, const RunningJob* b) {
                     if (a->priority != b->priority) return a->priority < b->priority;
                     return a->seq > b->seq;
                   });
  std::vector<const RunningJob*> chosen;
  size_t room = free + coming;
  for (const RunningJob* r : candidates) {
    if (room >= static_cast<size_t>(job.gpus)) break;
    chosen.push_back(r);
    room += r->devices.size();
  }
  if (room < static_cast<size_t>(job.gpus)) return {};
  // Spare the ones taken early that later, larger ones made unnecessary.
  for (size_t i = chosen.size(); i-- > 0;) {
    if (room - chosen[i]->devices.size() >= static_cast<size_t>(job.gpus)) {
      room -= chosen[i]->devices.size();
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return chosen;
}

}  // namespace

ScheduleDecision Schedule(const std::vector<std::string>& devices,
                          const std::map<std::string, std::string>& busy,
                          std::vector<QueuedJob> queued, const std::string& unit,
                          const std::vector<RunningJob>& running) {
  std::stable_sort(queued.begin(), queued.end(), [](const QueuedJob& a, const QueuedJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.seq < b.seq;
  });
  std::vector<std::string> free;
  for (const auto& d : devices) {
    if (!busy.count(d)) free.push_back(d);
  }
  size_t coming = 0;  // devices of jobs already stopping
  std::string stopping;
  for (const RunningJob& r : running) {
    if (!r.stopping) continue;
    coming += r.devices.size();
    stopping += (stopping.empty() ? "" : ", ") + r.id;
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
    int ranks = job.gpus;
    if (ranks > static_cast<int>(free.size())) {
      for (int k : job.shrink_to) {
        if (k >= 1 && k < job.gpus && k <= static_cast<int>(free.size())) {
          ranks = k;
          break;
        }
      }
    }
    if (ranks <= static_cast<int>(free.size())) {
      Placement p;
      p.job_id = job.id;
      p.devices.assign(free.begin(), free.begin() + ranks);
      free.erase(free.begin(), free.begin() + ranks);
      out.placements.push_back(p);
      continue;
    }
    blocker = &job;
    const std::string waiting =
        "waiting for " + Plural(job.gpus, unit) + ": " + std::to_string(free.size()) + " free";
    std::vector<const RunningJob*> victims = ChooseVictims(job, free.size(), coming, running);
    if (!victims.empty()) {
      std::string names;
      for (const RunningJob* v : victims) {
        out.preemptions.push_back({v->id, job.id});
        names +=
            (names.empty() ? "" : ", ") + v->id + " (priority " + std::to_string(v->priority) + ")";
      }
      out.wait_reasons[job.id] = waiting + "; preempting " + names;
      continue;
    }
    if (!stopping.empty() && free.size() + coming >= static_cast<size_t>(job.gpus)) {
      out.wait_reasons[job.id] = waiting + ", " + stopping + " stopping";
      continue;
    }
    std::set<std::string> holders;
    for (const auto& [device, holder] : busy) holders.insert(holder);
    for (const auto& p : out.placements) holders.insert(p.job_id);
    std::string held;
    for (const auto& h : holders) held += (held.empty() ? "" : ", ") + h;
    out.wait_reasons[job.id] = waiting + (held.empty() ? "" : ", in use by " + held);
  }
  return out;
}

}  // namespace adctl
