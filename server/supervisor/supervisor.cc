#include "server/supervisor/supervisor.h"

#include <utility>

namespace adctl {

Supervisor::Supervisor(const SupervisorOptions& options, Store* store, Launchers launchers,
                       SupervisorObserver* observer, Clock* clock)
    : recorder_(store, observer, &changes_),
      monitor_(options, store, std::move(launchers), &recorder_, &changes_, clock),
      jobs_(options, store, &monitor_, &recorder_, &changes_, clock),
      workers_(store, &recorder_, &changes_, clock, options.heartbeat_interval_ms,
               options.metrics_max_points),
      notifier_(options.webhooks, [this](const std::string& job_id, const std::string& level,
                                         const std::string& message) {
        (void)recorder_.AddEvent(job_id, 0, "webhook", level, message);
      }) {
  recorder_.set_notifier(&notifier_);
}

Supervisor::~Supervisor() { Stop(); }

Status Supervisor::Start() {
  ADCTL_RETURN_IF_ERROR(monitor_.Reconcile());
  jobs_.StopRanksOfFoldersWithoutRecord();
  changes_.Open();
  notifier_.Start();
  monitor_.StartThread();
  return Status::Ok();
}

void Supervisor::Stop() {
  changes_.Close();
  monitor_.StopThread();
  // After the monitor: the jobs it ended while stopping are queued; what is still queued is
  // dropped with a warning.
  notifier_.Stop();
}

}  // namespace adctl
