// The worker hub: what adworker ranks call (the WorkerService). Authorisation by the job's
// token, rank registration, heartbeats (whose reply carries the stop flag of a pause or
// cancel), the rendezvous key-value store with long-poll, and the ranks' reports: metric
// points, training started, checkpoints and free-form events. Reports of a superseded attempt
// are dropped. Works on the Store alone (no process state). Thread-safe.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "server/store/store.h"
#include "server/supervisor/change_feed.h"
#include "server/supervisor/job_recorder.h"

namespace adctl {

class WorkerHub {
 public:
  // `metrics_max_points` > 0 bounds each (job, rank) series as points arrive (Store::
  // ThinMetrics once that many new points have come in since the last thinning).
  WorkerHub(Store* store, JobRecorder* recorder, ChangeFeed* changes, Clock* clock,
            int heartbeat_interval_ms, int64_t metrics_max_points = 0)
      : store_(store),
        recorder_(recorder),
        changes_(changes),
        clock_(clock),
        heartbeat_interval_ms_(heartbeat_interval_ms),
        metrics_max_points_(metrics_max_points) {}

  // Whether `token`, the bearer token the rank presented, is the one rank `rank` of `attempt`
  // was launched with: false (the caller is not authenticated as that rank: the WorkerService
  // answers UNAUTHENTICATED) for a missing or wrong token. Errors: NotFound for an unknown job,
  // PermissionDenied for an attempt or rank the job does not have, FailedPrecondition once the
  // attempt has ended or was superseded (its token is no longer accepted).
  Result<bool> Authorize(const std::string& job_id, int attempt, int rank,
                         const std::string& token);
  Status RegisterRank(const std::string& job_id, int attempt, int rank, int world_size, int pid,
                      const std::string& host);
  // Returns whether the rank must stop (pause/cancel), with the reason.
  Result<std::pair<bool, std::string>> Heartbeat(const std::string& job_id, int attempt, int rank,
                                                 int pid);
  Status KvSet(const std::string& job_id, int attempt, const std::string& key,
               const std::string& value);
  // Waits up to `timeout_ms` (capped at 30 s); nullopt when the key did not appear.
  Result<std::optional<std::string>> KvGet(const std::string& job_id, int attempt,
                                           const std::string& key, int timeout_ms);
  Status ReportMetrics(const std::string& job_id, int attempt, int rank,
                       std::vector<MetricRecord> points);
  Status ReportTrainingStarted(const std::string& job_id, int attempt, int rank,
                               int64_t resumed_from_step, int64_t total_steps);
  Status ReportCheckpoint(const std::string& job_id, int attempt, int rank,
                          CheckpointRecord checkpoint);
  // Validation samples of rank 0 (paths relative to the job directory, under samples/).
  Status ReportSamples(const std::string& job_id, int attempt, int rank,
                       std::vector<SampleRecord> samples, const std::string& message);
  Status ReportWorkerEvent(const std::string& job_id, int attempt, int rank,
                           const std::string& level, const std::string& message);

  int heartbeat_interval_ms() const { return heartbeat_interval_ms_; }

 private:
  // The job, or FailedPrecondition when `attempt` is not its current attempt or it ended.
  Result<JobRecord> CurrentAttempt(const std::string& job_id, int attempt);

  Store* const store_;
  JobRecorder* const recorder_;
  ChangeFeed* const changes_;
  Clock* const clock_;
  const int heartbeat_interval_ms_;
  const int64_t metrics_max_points_;
  std::atomic<int64_t> points_since_thinning_{0};
};

}  // namespace adctl
