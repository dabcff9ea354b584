// adctld's durable state in one SQLite file: jobs, attempts, ranks, events, metric points,
// checkpoints and the rendezvous key-value store.
//
// SQLite in WAL mode with foreign keys on, a busy timeout, and versioned migrations
// (PRAGMA user_version; see store_schema.cc). Every job state change goes through
// `Transition`, which checks the move against job_state.h and writes the new state and its
// event row in one transaction. Thread-safe: one connection guarded by a mutex (adctld's write
// rate is a few rows per training step, far below what one connection serves).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "common/metric_values.h"
#include "common/record_values.h"
#include "common/status.h"
#include "server/store/job_state.h"

namespace adctl {

// Where a job stands, in its jobs row: rank 0's latest metric point (ForEachProgressMetric),
// when it came, and what the checkpoints, evals and validations reported last.
struct JobProgress {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double clips_per_second = 0;
  double step_seconds = 0;
  double mfu_ratio = 0;  // 0 unknown
  double learning_rate = 0;
  double updated_at = 0;  // the point's time (column progress_updated_at)
  int64_t last_checkpoint_step = 0;
  double eval_loss = 0;  // the latest eval loss (at eval_step; 0: none yet)
  int64_t eval_step = 0;
  double validation_seconds = 0;  // the latest validation's render time (its samples' sum)
};

// The members of JobProgress that rank 0's metric point sets: each is the MetricValues value of
// its name (common/metric_values.h) in the jobs column of that name. ReadJob reads them and
// AddMetrics writes them from this list alone; tests/server/store_test.cc checks every name
// against the metric list. Adding one: a member above, a line here, and a migration adding
// its jobs column.
template <typename Progress, typename F>
void ForEachProgressMetric(Progress& p, F&& f) {
  f("step", p.step);
  f("total_steps", p.total_steps);
  f("loss", p.loss);
  f("clips_per_second", p.clips_per_second);
  f("step_seconds", p.step_seconds);
  f("mfu_ratio", p.mfu_ratio);
  f("learning_rate", p.learning_rate);
}
// The progress metric point `m` gives: ForEachProgressMetric's members, and updated_at.
JobProgress ProgressOf(const MetricValues& m);

struct JobRecord {
  std::string id;
  int64_t seq = 0;  // submission order
  std::string name;
  std::string submission_id;
  std::string spec_yaml;  // canonical YAML of the effective spec
  std::string token;      // per-job secret handed to its ranks
  std::string job_dir;
  JobState state = JobState::kQueued;
  int gpus = 1;
  int priority = 0;
  int attempt = 0;
  int restarts = 0;
  int max_restarts = 0;
  double grace_seconds = 60;
  // From the spec, kept so that nothing after submit parses it again.
  double hang_timeout_seconds = 0;          // resources.hang_timeout_seconds
  double rendezvous_timeout_seconds = 120;  // resources.rendezvous_timeout_seconds
  std::string checkpoint_dir;               // checkpoint.dir ("" = <job dir>/checkpoints)
  double submitted_at = 0;
  double started_at = 0;
  double finished_at = 0;
  std::string message;
  std::vector<std::string> devices;  // current attempt
  JobProgress progress;
  LauncherKind launcher = LauncherKind::kLocal;  // resources.launcher, adctld's default resolved
  std::string cluster_job;                       // the current attempt's Slurm job id ("" : none)
  std::string submitted_by;  // the submitting token's name ("owner" tokenless; "" unknown)
  // Jobs it waits for (adctl submit --after): it starts when they all SUCCEEDED (or, with
  // after_any, when they all ended) and fails without starting otherwise.
  std::vector<std::string> after;
  bool after_any = false;
  std::map<std::string, std::string> labels;  // adctl submit --label k=v
  // The job that preempted it (resources.preemptible): set as it is paused for that job, kept
  // while it waits in the queue again, cleared when it starts. "" otherwise.
  std::string preempted_by;
};

// Job labels: at most 32, keys of 1–63 characters from [A-Za-z0-9_./-], values up to 256 bytes
// without NUL. InvalidArgument naming `field` ("labels") and the label otherwise.
Status CheckLabels(const std::map<std::string, std::string>& labels, const std::string& field);

// Which jobs a listing keeps beyond their states: every one of `labels`, and (when not empty)
// the submitter's token name.
struct JobSelector {
  std::map<std::string, std::string> labels;
  std::string submitted_by;
};

struct RankRecord {
  std::string job_id;
  int attempt = 0;
  int rank = 0;
  int pgid = 0;                  // process group (the launcher's per-rank shepherd)
  uint64_t pgid_start_time = 0;  // /proc start time of the group leader, guards pid reuse
  int worker_pid = 0;            // the adworker, from its registration
  std::string host;
  std::string device;
  bool exited = false;
  int exit_code = 0;
  int exit_signal = 0;
  double last_heartbeat = 0;
};

struct AttemptRecord {
  std::string job_id;
  int attempt = 0;
  int world_size = 0;
  std::vector<std::string> devices;
  double started_at = 0;
  double ended_at = 0;
  std::string end_reason;
  std::string token_sha256;  // of the token its ranks authenticate with ("": a legacy attempt)
  std::string cluster_job;   // the Slurm job id of a slurm attempt ("" : local)
};

struct EventRecord {
  int64_t id = 0;
  std::string job_id;
  int attempt = 0;
  double time = 0;
  std::string kind;  // "transition", "rank_exit", "checkpoint", "worker", "submitted"
  std::optional<JobState> from_state;
  std::optional<JobState> to_state;
  std::string level = "info";
  std::string message;
};

// One rank's metric point as stored: the measured values (common/metric_values.h, whose
// ForEachMetricValue names the columns) and who sent them.
struct MetricRecord : MetricValues {
  int64_t id = 0;
  std::string job_id;
  int attempt = 0;
  int rank = 0;
};

// A checkpoint as rank 0 reported it: its values (common/record_values.h, the table's columns
// of the same names) and who reported it when.
struct CheckpointRecord : CheckpointValues {
  std::string job_id;
  int attempt = 0;
  double created_at = 0;
};

// One validation sample file pair (or a step's grid), as rank 0 reported it.
struct SampleRecord : SampleValues {
  std::string job_id;
  int attempt = 0;
  double created_at = 0;
};

// Column changes made in the same transaction as a state change.
struct TransitionChanges {
  std::optional<int> attempt;        // also inserts the attempts row (with world size = job gpus)
  std::string attempt_token_sha256;  // that row's worker-token hash
  std::optional<std::vector<std::string>> devices;
  std::optional<int> restarts;
  std::optional<int> gpus;
  std::optional<std::string> spec_yaml;
  std::optional<double> started_at;
  std::optional<std::string> preempted_by;
  std::string end_attempt_reason;  // non-empty: closes the current attempt row
};

class Store {
 public:
  // Opens (creating when missing) and migrates the database at `path`. Times the store stamps
  // itself (a job's submission, an event, a checkpoint or sample without one) come from `clock`,
  // which must outlive the store.
  static Result<std::unique_ptr<Store>> Open(const std::string& path,
                                             const Clock* clock = SystemClock());
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  int schema_version() const { return schema_version_; }
  // The time the store stamps records with; JobMetrics keeps its retention on it too.
  const Clock* clock() const { return clock_; }
  // Fault injection (tests): while on, every write fails as it would on a full or read-only
  // disk (SQLite's query_only); reads still work.
  Status SetWritesFail(bool fail);

  // Jobs.
  // Also writes the "submitted" event, naming `by` (who submitted) when given.
  Status InsertJob(const JobRecord& job, const std::string& by = "");
  Result<JobRecord> GetJob(const std::string& id);
  Result<std::optional<JobRecord>> FindJobBySubmissionId(const std::string& submission_id);
  // Newest first. `before_seq` > 0 pages: jobs with seq < before_seq. `selector`: the labels
  // and submitter they must have too.
  Result<std::vector<JobRecord>> ListJobs(const std::vector<JobState>& states, int limit,
                                          int64_t before_seq = 0, const JobSelector& selector = {});
  // Jobs in any non-terminal state, oldest first.
  Result<std::vector<JobRecord>> ListActiveJobs();
  // Checks the move, applies `changes`, writes the event, all in one transaction. When
  // `expected_from` is set and the job is in another state: FailedPrecondition (a racing
  // change won). Returns the updated job.
  Result<JobRecord> Transition(const std::string& id, std::optional<JobState> expected_from,
                               JobState to, const std::string& message,
                               const TransitionChanges& changes = {});
  Result<std::vector<std::pair<JobState, int64_t>>> CountJobsByState();
  // `adctl set JOB --priority P`: the job's priority and its spec's YAML (resources.priority)
  // with a "priority" event saying `message`. FailedPrecondition for a job that ended.
  Result<JobRecord> SetPriority(const std::string& id, int priority, const std::string& spec_yaml,
                                const std::string& message);

  // Attempts and ranks.
  Result<AttemptRecord> GetAttempt(const std::string& job_id, int attempt);
  // The cluster's id of an attempt's batch job (the Slurm launcher, right after sbatch).
  Status SetAttemptClusterJob(const std::string& job_id, int attempt,
                              const std::string& cluster_job);
  Status UpsertRank(const RankRecord& rank);
  Status RecordRankWorker(const std::string& job_id, int attempt, int rank, int worker_pid,
                          const std::string& host, double now);
  Status RecordHeartbeat(const std::string& job_id, int attempt, int rank, double now);
  Status RecordRankExit(const std::string& job_id, int attempt, int rank, int exit_code,
                        int exit_signal);
  Result<std::vector<RankRecord>> ListRanks(const std::string& job_id, int attempt);

  // Events.
  Result<int64_t> AddEvent(const EventRecord& event);
  Result<std::vector<EventRecord>> ListEvents(const std::string& job_id, int64_t after_id,
                                              int limit = 0);
  // The newest error a rank of an attempt reported about itself (a "worker" event at level
  // error, "rank R: …"), without the "rank R: " prefix; "" when it reported none.
  Result<std::string> LastRankError(const std::string& job_id, int attempt, int rank);

  // Metric points (full history keyed by job, attempt, rank, step) and the job's progress.
  Status AddMetrics(const std::vector<MetricRecord>& points);
  Result<std::vector<MetricRecord>> ListMetrics(const std::string& job_id, int64_t after_id,
                                                std::optional<int> rank = std::nullopt,
                                                int limit = 0);
  // The newest point of each rank (any attempt), by rank.
  Result<std::vector<MetricRecord>> LatestMetricsPerRank(const std::string& job_id);
  // Bounds the history: every (job, rank) series over `max_per_rank` points (>= 4) loses every
  // second point of its older half, so recent steps keep full resolution and older ones thin
  // out (like a round-robin database) while the first and the newest points stay. Returns the
  // number of points removed.
  Result<int64_t> ThinMetrics(int64_t max_per_rank);

  // Checkpoints as reported by the ranks.
  Status AddCheckpoint(const CheckpointRecord& checkpoint);
  Result<std::vector<CheckpointRecord>> ListCheckpoints(const std::string& job_id);
  // Steps a user pinned (retention keeps them); `by` names the token that pinned.
  Status SetCheckpointPin(const std::string& job_id, int64_t step, bool pinned,
                          const std::string& by);
  Result<std::set<int64_t>> ListCheckpointPins(const std::string& job_id);

  // Validation samples; a step rendered again (after a restart) replaces its rows. The sum of
  // the grid's render_seconds (the whole render; without a grid, the samples' sum) becomes the
  // job's progress.validation_seconds.
  Status AddSamples(const std::vector<SampleRecord>& samples);
  // By step, then index with the grid last; `step` 0: every step.
  Result<std::vector<SampleRecord>> ListSamples(const std::string& job_id, int64_t step = 0);

  // Rendezvous KV, scoped to (job, attempt).
  Status KvSet(const std::string& job_id, int attempt, const std::string& key,
               const std::string& value);
  Result<std::optional<std::string>> KvGet(const std::string& job_id, int attempt,
                                           const std::string& key);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  Status Migrate();
  Status Exec(const std::string& sql);
  Result<JobRecord> GetJobLocked(const std::string& id);
  Result<int64_t> AddEventLocked(const EventRecord& event);

  // Constant after construction.
  int schema_version_ = 0;
  const Clock* clock_ = nullptr;

  std::mutex mu_;
  sqlite3* db_;  // guarded by mu_
};

}  // namespace adctl
