// The one way the coordinator records what happened to a job: a state transition (through
// Store::Transition, which writes the state, the attempt row and the event in one transaction)
// or a plain event row. Each record is logged, reported to the observer (Prometheus) and the
// webhooks (server/notify/webhooks.h) when it ends a job, and wakes the ChangeFeed's waiters. It
// also holds the jobs' parsed specs (parsed_specs.h), forgetting a job's when the job ends.
// Thread-safe (the Store is).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/notify/webhooks.h"
#include "server/store/store.h"
#include "server/supervisor/change_feed.h"
#include "server/supervisor/parsed_specs.h"

namespace adctl {

// Receives what Prometheus exports (server/metrics/). Called from handler and tick threads.
class SupervisorObserver {
 public:
  virtual ~SupervisorObserver() = default;
  virtual void OnMetrics(const std::vector<MetricRecord>& points) = 0;
  virtual void OnCheckpoint(const CheckpointRecord& checkpoint) = 0;
  virtual void OnRestart(const std::string& job_id) = 0;
  virtual void OnJobFinished(const std::string& job_id, JobState state) = 0;
};

class JobRecorder {
 public:
  // `observer` may be null.
  JobRecorder(Store* store, SupervisorObserver* observer, ChangeFeed* changes)
      : store_(store), observer_(observer), changes_(changes) {}

  // Moves the job to `to` (refused, with a warning, when the state machine forbids it or the
  // job is not in `expected_from`).
  Result<JobRecord> Transition(const std::string& job_id, JobState to, const std::string& message,
                               const TransitionChanges& changes = {},
                               std::optional<JobState> expected_from = std::nullopt);
  // Stores one event row (not a transition) and wakes the waiters.
  Status AddEvent(const std::string& job_id, int attempt, const std::string& kind,
                  const std::string& level, const std::string& message);
  // Validation samples of `job` were recorded: the webhooks get a "job.samples" event.
  void SamplesReady(const JobRecord& job, const std::vector<SampleRecord>& samples);

  // Where the job.ended and job.samples events go (null: nowhere). Set before Start.
  void set_notifier(WebhookNotifier* notifier) { notifier_ = notifier; }

  SupervisorObserver* observer() const { return observer_; }
  ParsedSpecs& specs() { return specs_; }

 private:
  // The job's notify.webhooks (from its spec).
  std::vector<std::string> Webhooks(const JobRecord& job);

  Store* const store_;
  SupervisorObserver* const observer_;
  ChangeFeed* const changes_;
  WebhookNotifier* notifier_ = nullptr;
  ParsedSpecs specs_;
};

}  // namespace adctl
