#include "server/supervisor/supervisor.h"

namespace adctl {

Supervisor::Supervisor(const SupervisorOptions& options, Store* store, Launcher* launcher,
                       SupervisorObserver* observer, Clock* clock, Launcher* slurm)
    : recorder_(store, observer, &changes_),
      monitor_(options, store, launcher, &recorder_, &changes_, clock, slurm),
      jobs_(options, store, &monitor_, &recorder_, &changes_, clock),
      workers_(store, &recorder_, &changes_, clock, options.heartbeat_interval_ms,
               options.metrics_max_points) {}

Supervisor::~Supervisor() { Stop(); }

Status Supervisor::Start() {
  ADCTL_RETURN_IF_ERROR(monitor_.Reconcile());
  jobs_.StopRanksOfFoldersWithoutRecord();
  changes_.Open();
  monitor_.StartThread();
  return Status::Ok();
}

void Supervisor::Stop() {
  changes_.Close();
  monitor_.StopThread();
}

}  // namespace adctl
