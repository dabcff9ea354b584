// The coordinator's core, assembled: the parts below over one Store, one Launcher and one
// Clock. The gRPC and HTTP handlers call the part they serve (server/grpc/, server/http/,
// server/api/job_queries.h), so everything here is testable without a socket.
//
//   JobManager      submit, cancel, pause, resume (job_manager.h)
//   AttemptMonitor  launch, reap, teardown, restart policy, hang watchdog, schedule, reconcile
//                   (attempt_monitor.h); launch_plan.h builds each rank's argv and environment,
//                   exit_policy.h classifies how a rank ended
//   WorkerHub       register, heartbeat, rendezvous KV, reports (worker_hub.h)
//   JobRecorder     every state transition and event row (job_recorder.h)
//   ChangeFeed      "something changed" for long polls (change_feed.h)
//
// Start() reconciles the store with the processes that exist, then ticks the monitor on its
// thread; Stop() ends the thread (ranks keep running and re-attach on the next Start). Tests
// that drive time by hand call monitor().Reconcile() and monitor().Tick() instead of Start().
#pragma once

#include "common/clock.h"
#include "common/status.h"
#include "server/launcher/launchers.h"
#include "server/store/store.h"
#include "server/supervisor/attempt_monitor.h"
#include "server/supervisor/change_feed.h"
#include "server/supervisor/job_manager.h"
#include "server/supervisor/job_recorder.h"
#include "server/supervisor/options.h"
#include "server/supervisor/worker_hub.h"

namespace adctl {

class Supervisor {
 public:
  // `observer` may be null; `clock` defaults to the wall clock. `launchers`: those adctld runs
  // (not owned), with the default for specs that name none.
  Supervisor(const SupervisorOptions& options, Store* store, Launchers launchers,
             SupervisorObserver* observer, Clock* clock = SystemClock());
  ~Supervisor();

  Status Start();
  void Stop();

  JobManager& jobs() { return jobs_; }
  AttemptMonitor& monitor() { return monitor_; }
  WorkerHub& workers() { return workers_; }
  ChangeFeed& changes() { return changes_; }
  JobRecorder& recorder() { return recorder_; }
  WebhookNotifier& notifier() { return notifier_; }
  ParsedSpecs& specs() { return recorder_.specs(); }

 private:
  ChangeFeed changes_;
  JobRecorder recorder_;
  AttemptMonitor monitor_;
  JobManager jobs_;
  WorkerHub workers_;
  // Last: stopped and destroyed first, as its thread records events through recorder_.
  WebhookNotifier notifier_;
};

}  // namespace adctl
