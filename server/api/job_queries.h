// The read side of the JobService and the HTTP JSON API: jobs, events, metrics, checkpoints,
// rank logs and devices, as store records. The gRPC and HTTP handlers validate their request,
// call this class and convert the answer (server/api/convert.h); none of them touches the
// Store or the job directory. Thread-safe (the Store and the AttemptMonitor are).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "server/store/store.h"
#include "server/supervisor/supervisor.h"

namespace adctl {

// Where a preprocess job stands, summed over its ranks' newest points (v1::PreprocessProgress).
struct PreprocessView {
  int64_t shards_written = 0;
  int64_t shards = 0;
  int64_t clips_written = 0;
  std::map<std::string, int64_t> videos_skipped;  // every reason, zeros too
  double videos_per_second = 0;                   // rank 0's latest (all ranks)
};

struct JobView {
  JobRecord job;
  std::optional<PreprocessView> preprocess;  // GetJob of a preprocess job
  std::string wait_reason;                   // why a QUEUED job waits ("" otherwise)
  std::vector<RankRecord> ranks;             // the current attempt's ranks (with_ranks only)
  std::map<int, bool> rank_alive;            // rank → process alive
  ClusterJobInfo cluster;                    // slurm jobs (GetJob): the batch job as last polled
};

// A checkpoint as the store recorded it, as found on disk, or both.
// Its values (common/record_values.h) as rank 0 reported them: save and stall times are 0 for
// a checkpoint only found on disk.
struct CheckpointView : CheckpointValues {
  int attempt = 0;
  double created_at = 0;
  bool on_disk = false;
  bool pinned = false;  // adctl ckpt pin: retention keeps it
};

// A validation sample as recorded, and whether its files are still there.
struct SampleView {
  SampleRecord sample;
  bool on_disk = false;
};

// One artifact file (samples/…, export/…) of a job.
struct ArtifactView {
  std::string relative;  // as asked
  std::string path;      // absolute, on the coordinator
  int64_t size_bytes = 0;
};

// One read of a rank's log (JobQueries::ReadRankLog).
struct LogRead {
  bool exists = false;  // the log file is there
  int64_t size = 0;     // its size now
  int64_t offset = 0;   // where `data` starts
  std::string data;     // at most max_bytes from `offset`
};

// What Watch has already delivered.
struct WatchCursor {
  int64_t last_event_id = 0;
  int64_t last_metric_id = 0;
};

struct WatchBatch {
  JobView job;
  std::vector<EventRecord> events;    // after the cursor
  std::vector<MetricRecord> metrics;  // after the cursor
};

// Bounds on what one read answers (GET …/metrics, a watch batch): a job's whole history can be
// hundreds of MB. A read asks for at most kMaxMetricPointsPerRank points a series (default
// kDefaultMetricPointsPerRank); a watch batch carries at most kMaxWatchBatchPoints points and
// the next batch goes on from its cursor.
constexpr int kDefaultMetricPointsPerRank = 2000;
constexpr int kMaxMetricPointsPerRank = 20000;
constexpr int kMaxWatchBatchPoints = 5000;

// Thins each (rank, attempt) series of `points` (ordered by id) to at most `max_per_rank`
// points, evenly spaced by index, first and last kept; the result stays ordered by id.
std::vector<MetricRecord> DownsampleMetrics(std::vector<MetricRecord> points, int max_per_rank);

class JobQueries {
 public:
  JobQueries(Store* store, Supervisor* supervisor) : store_(store), supervisor_(supervisor) {}

  Result<JobView> GetJob(const std::string& job_id, bool with_ranks) const;
  // One page of jobs, newest first, for JobService.ListJobs and GET /api/v1/jobs:
  // `page_size` 0 is 100, one over 1000 is 1000 (capped, for both APIs alike), negative an
  // error; `page_token` "" or the
  // `next_page_token` of the previous page ("" on the last page).
  struct JobPage {
    std::vector<JobView> jobs;
    std::string next_page_token;
  };
  Result<JobPage> ListJobPage(const std::vector<JobState>& states, int page_size,
                              const std::string& page_token,
                              const JobSelector& selector = {}) const;
  // Newest first; `before_seq` > 0 pages on (ListJobs' page token).
  Result<std::vector<JobView>> ListJobs(const std::vector<JobState>& states, int limit,
                                        int64_t before_seq = 0,
                                        const JobSelector& selector = {}) const;
  Result<std::vector<EventRecord>> ListEvents(const std::string& job_id, int64_t after_id = 0,
                                              int limit = 0) const;
  // Points after `after_id`, ordered by id, each rank's series (per attempt) thinned to at most
  // `max_points_per_rank` points (0: kDefaultMetricPointsPerRank; more than
  // kMaxMetricPointsPerRank: an error), evenly spaced over its history and always keeping its
  // first and last point (DownsampleMetrics).
  Result<std::vector<MetricRecord>> ListMetrics(const std::string& job_id, int64_t after_id = 0,
                                                int max_points_per_rank = 0) const;
  // Disk is the truth for what exists (retention deletes); the store adds who wrote it, when.
  // Ordered by step.
  Result<std::vector<CheckpointView>> ListCheckpoints(const std::string& job_id) const;
  // Recorded samples by step and index (grid last); `step` 0: all.
  Result<std::vector<SampleView>> ListSamples(const std::string& job_id, int64_t step = 0) const;
  // An artifact file: InvalidArgument for a path outside samples/ and export/ (JobLayout::
  // artifact), NotFound when it is not a regular file.
  Result<ArtifactView> Artifact(const std::string& job_id, const std::string& relative) const;
  // InvalidArgument unless the job has rank `rank` and attempt `attempt` (0: the current one).
  static Status CheckRankLogRef(const JobRecord& job, int attempt, int rank);
  // Reads rank `rank`'s log of `attempt` from `offset`, or, with tail_bytes > 0, its last
  // tail_bytes bytes. A log now shorter than `offset` was replaced (truncated): it is read from
  // the start. The one log reader of gRPC's StreamLogs and HTTP's /logs.
  LogRead ReadRankLog(const JobRecord& job, int attempt, int rank, int64_t offset, size_t max_bytes,
                      int64_t tail_bytes = 0) const;
  std::string RankLogPath(const JobRecord& job, int attempt, int rank) const;
  std::vector<DeviceStatus> Devices() const { return supervisor_->monitor().Devices(); }

  // A cursor that starts now: events after `after_event_id`, metrics from now on.
  Result<WatchCursor> StartWatch(const std::string& job_id, int64_t after_event_id) const;
  // The job and what happened since `cursor`, which it advances.
  Result<WatchBatch> Watch(const std::string& job_id, WatchCursor* cursor) const;
  // Blocks until something changed after `*version` or `timeout_ms` passed.
  void WaitForChange(uint64_t* version, int timeout_ms) const {
    supervisor_->changes().WaitForChange(version, timeout_ms);
  }
  // The long poll of the HTTP API: Watch, but when nothing happened since `cursor` it waits up
  // to `timeout_ms` for an event or a metric point of this job (every state change has its
  // event row). Returns an empty batch (the job snapshot only) at the timeout, when adctld is
  // stopping, or when `abandoned` (checked about once a second; may be empty) says the caller
  // left.
  Result<WatchBatch> WaitForUpdates(const std::string& job_id, WatchCursor* cursor, int timeout_ms,
                                    const std::function<bool()>& abandoned = {}) const;

 private:
  Store* const store_;
  Supervisor* const supervisor_;
};

}  // namespace adctl
