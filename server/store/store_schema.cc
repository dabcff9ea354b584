// The store's SQL schema: the numbered migrations that build it, oldest first. Store::Open
// (store.cc) applies those a database has not had yet, each in its own transaction, then adds
// the metric columns the list has and the table lacks.
#include "server/store/store_schema.h"

#include <cstdio>
#include <string_view>
#include <type_traits>

#include "common/metric_values.h"

namespace adctl::store_internal {

const std::vector<const char*>& Migrations() {
  // Versioned schema. Append a migration, never edit one that shipped: the index + 1 is the
  // PRAGMA user_version a database has after applying it.
  static const std::vector<const char*> migrations = {
      // 1: the initial schema.
      R"sql(
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  submission_id TEXT,
  spec_yaml TEXT NOT NULL,
  token TEXT NOT NULL,
  job_dir TEXT NOT NULL,
  state INTEGER NOT NULL,
  gpus INTEGER NOT NULL,
  priority INTEGER NOT NULL,
  attempt INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0,
  max_restarts INTEGER NOT NULL,
  grace_seconds REAL NOT NULL,
  submitted_at REAL NOT NULL,
  started_at REAL NOT NULL DEFAULT 0,
  finished_at REAL NOT NULL DEFAULT 0,
  message TEXT NOT NULL DEFAULT '',
  devices TEXT NOT NULL DEFAULT '',
  step INTEGER NOT NULL DEFAULT 0,
  total_steps INTEGER NOT NULL DEFAULT 0,
  loss REAL NOT NULL DEFAULT 0,
  clips_per_second REAL NOT NULL DEFAULT 0,
  step_seconds REAL NOT NULL DEFAULT 0,
  last_checkpoint_step INTEGER NOT NULL DEFAULT 0,
  progress_updated_at REAL NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_submission_id ON jobs(submission_id) WHERE submission_id IS NOT NULL;
CREATE INDEX jobs_state ON jobs(state);

CREATE TABLE attempts (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt INTEGER NOT NULL,
  world_size INTEGER NOT NULL,
  devices TEXT NOT NULL,
  started_at REAL NOT NULL,
  ended_at REAL NOT NULL DEFAULT 0,
  end_reason TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, attempt)
);

CREATE TABLE ranks (
  job_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  pgid INTEGER NOT NULL,
  pgid_start_time INTEGER NOT NULL,
  worker_pid INTEGER NOT NULL DEFAULT 0,
  host TEXT NOT NULL DEFAULT '',
  device TEXT NOT NULL DEFAULT '',
  exited INTEGER NOT NULL DEFAULT 0,
  exit_code INTEGER NOT NULL DEFAULT 0,
  exit_signal INTEGER NOT NULL DEFAULT 0,
  last_heartbeat REAL NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, attempt, rank),
  FOREIGN KEY (job_id, attempt) REFERENCES attempts(job_id, attempt) ON DELETE CASCADE
);

CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt INTEGER NOT NULL,
  time REAL NOT NULL,
  kind TEXT NOT NULL,
  from_state INTEGER,
  to_state INTEGER,
  level TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX events_job ON events(job_id, id);

CREATE TABLE metrics (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  step INTEGER NOT NULL,
  total_steps INTEGER NOT NULL,
  time REAL NOT NULL,
  loss REAL NOT NULL,
  learning_rate REAL NOT NULL,
  grad_norm REAL NOT NULL,
  step_seconds REAL NOT NULL,
  data_wait_seconds REAL NOT NULL,
  allreduce_exposed_seconds REAL NOT NULL,
  clips_per_second REAL NOT NULL,
  samples_seen INTEGER NOT NULL,
  peak_memory_bytes INTEGER NOT NULL,
  UNIQUE (job_id, attempt, rank, step)
);
CREATE INDEX metrics_job ON metrics(job_id, id);

CREATE TABLE checkpoints (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  path TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  save_seconds REAL NOT NULL,
  created_at REAL NOT NULL,
  PRIMARY KEY (job_id, step)
);

CREATE TABLE kv (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  attempt INTEGER NOT NULL,
  key TEXT NOT NULL,
  value BLOB NOT NULL,
  PRIMARY KEY (job_id, attempt, key)
);
)sql",
      // 2: the spec fields the coordinator needs after submit, so it never re-parses the spec.
      R"sql(
ALTER TABLE jobs ADD COLUMN hang_timeout_seconds REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN checkpoint_dir TEXT NOT NULL DEFAULT '';
)sql",
      // 3: validation samples (job artifacts with their step and prompt).
      R"sql(
CREATE TABLE samples (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  idx INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  prompt TEXT NOT NULL,
  mp4 TEXT NOT NULL,
  gif TEXT NOT NULL,
  render_seconds REAL NOT NULL,
  created_at REAL NOT NULL,
  PRIMARY KEY (job_id, step, idx)
);
)sql",
      // 4: model FLOPs utilisation of each step.
      R"sql(
ALTER TABLE metrics ADD COLUMN mfu_ratio REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN mfu_ratio REAL NOT NULL DEFAULT 0;
)sql",
      // 5: the rank's device at each step (negative: not measured; older rows have none).
      R"sql(
ALTER TABLE metrics ADD COLUMN gpu_utilization REAL NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN gpu_memory_used_bytes INTEGER NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN gpu_memory_total_bytes INTEGER NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN gpu_power_watts REAL NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN gpu_temperature_celsius REAL NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN gpu_sm_clock_hertz REAL NOT NULL DEFAULT -1;
)sql",
      // 6: worker tokens per attempt, kept as hashes; the plaintext job tokens are dropped (their
      // ranks, if any still run, were started by an older adctld and cannot be re-attached).
      R"sql(
ALTER TABLE attempts ADD COLUMN token_sha256 TEXT NOT NULL DEFAULT '';
UPDATE jobs SET token = '';
)sql",
      // 7: how long an attempt's ranks have to register (resources.rendezvous_timeout_seconds).
      R"sql(
ALTER TABLE jobs ADD COLUMN rendezvous_timeout_seconds REAL NOT NULL DEFAULT 120;
)sql",
      // 8: launchers: where a job's ranks run, and the Slurm job id of each slurm attempt.
      R"sql(
ALTER TABLE jobs ADD COLUMN launcher TEXT NOT NULL DEFAULT 'local';
ALTER TABLE attempts ADD COLUMN cluster_job TEXT NOT NULL DEFAULT '';
)sql",
      // 9: the training time a checkpoint took (the rest of its save runs in the background).
      R"sql(
ALTER TABLE checkpoints ADD COLUMN stall_seconds REAL NOT NULL DEFAULT 0;
)sql",
      // 10: preprocess ranks' skipped videos, by reason.
      R"sql(
ALTER TABLE metrics ADD COLUMN videos_skipped_missing INTEGER NOT NULL DEFAULT 0;
ALTER TABLE metrics ADD COLUMN videos_skipped_unreadable INTEGER NOT NULL DEFAULT 0;
ALTER TABLE metrics ADD COLUMN videos_skipped_zero_frames INTEGER NOT NULL DEFAULT 0;
ALTER TABLE metrics ADD COLUMN videos_skipped_truncated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE metrics ADD COLUMN videos_skipped_too_short INTEGER NOT NULL DEFAULT 0;
)sql",
      // 11: who submitted each job (the token's name; --owner-only lets a submitter act only on
      // its own). Older jobs have none: only an admin acts on them under --owner-only.
      R"sql(
ALTER TABLE jobs ADD COLUMN submitted_by TEXT NOT NULL DEFAULT '';
)sql",
      // 12: checkpoints a user pinned (adctl ckpt pin): retention keeps them.
      R"sql(
CREATE TABLE checkpoint_pins (
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  pinned_at REAL NOT NULL,
  pinned_by TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, step)
);
)sql",
      // 13: eval loss on held-out clips (overall, and per timestep as JSON [[t, loss], ...]); the
      // job's latest eval loss and learning rate.
      R"sql(
ALTER TABLE metrics ADD COLUMN eval_loss REAL NOT NULL DEFAULT -1;
ALTER TABLE metrics ADD COLUMN eval_by_timestep TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN learning_rate REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN eval_loss REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN eval_step INTEGER NOT NULL DEFAULT 0;
)sql",
      // 14: how long the job's latest validation took to render (its samples' seconds), for the
      // ETA.
      R"sql(
ALTER TABLE jobs ADD COLUMN validation_seconds REAL NOT NULL DEFAULT 0;
)sql",
      // 15: dependencies (adctl submit --after J,K / --after-any): the ids, comma-separated; and
      // labels (adctl submit --label k=v) as a JSON object.
      R"sql(
ALTER TABLE jobs ADD COLUMN after_jobs TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN after_any INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
)sql",
      // 16: the job that preempted it (resources.preemptible), until it starts again: a preempted
      // job pausing when adctld restarts still goes back to the queue by itself.
      R"sql(
ALTER TABLE jobs ADD COLUMN preempted_by TEXT NOT NULL DEFAULT '';
)sql",
  };
  return migrations;
}

std::string MissingMetricColumns(const std::set<std::string, std::less<>>& columns) {
  const MetricValues defaults;
  std::string sql;
  ForEachMetricValue(defaults, [&](const char* name, const auto& value) {
    if (columns.count(std::string_view(name)) > 0) return;
    using T = std::decay_t<decltype(value)>;
    static_assert(std::is_integral_v<T> || std::is_floating_point_v<T>,
                  "a metric value is an integer or a float");
    std::string type, literal;
    if constexpr (std::is_integral_v<T>) {
      type = "INTEGER";
      literal = std::to_string(value);
    } else {
      type = "REAL";
      char text[32];
      std::snprintf(text, sizeof(text), "%.17g", static_cast<double>(value));  // round-trips
      literal = text;
    }
    sql += "ALTER TABLE metrics ADD COLUMN " + std::string(name) + " " + type +
           " NOT NULL DEFAULT " + literal + ";\n";
  });
  return sql;
}

}  // namespace adctl::store_internal
