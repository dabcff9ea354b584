#include "server/store/store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <type_traits>

namespace adctl {

namespace {

// Versioned schema. Append a migration, never edit one that shipped: the index + 1 is the
// PRAGMA user_version a database has after applying it.
const char* const kMigrations[] = {
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

std::string JoinDevices(const std::vector<std::string>& devices) {
  std::string out;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (i) out += ",";
    out += devices[i];
  }
  return out;
}

std::vector<std::string> SplitDevices(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// A prepared statement with positional binds; finalised on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Status prepare_status() const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return Internal(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
  }
  Stmt& Bind(const std::string& v) {
    sqlite3_bind_text(stmt_, ++index_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(const char* v) { return Bind(std::string(v)); }
  Stmt& BindBlob(const std::string& v) {
    sqlite3_bind_blob(stmt_, ++index_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int64_t v) {
    sqlite3_bind_int64(stmt_, ++index_, v);
    return *this;
  }
  Stmt& Bind(int v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& Bind(double v) {
    sqlite3_bind_double(stmt_, ++index_, v);
    return *this;
  }
  Stmt& BindNull() {
    sqlite3_bind_null(stmt_, ++index_);
    return *this;
  }
  // SQLITE_ROW → true, SQLITE_DONE → false; anything else is an error.
  Result<bool> Step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Internal(std::string("sqlite: ") + sqlite3_errmsg(db_));
  }
  Status Run() {
    auto r = Step();
    return r.ok() ? Status::Ok() : r.status();
  }
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  bool IsNull(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  std::string Text(int col) const {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
  int index_ = 0;
};

#define ADCTL_ASSIGN_ROW(var, expr)                     \
  auto var##_result = (expr);                           \
  if (!var##_result.ok()) return var##_result.status(); \
  bool var = var##_result.value()

// Rolls back unless committed.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) {
    ok_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~Txn() {
    if (ok_ && !committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Status begin_status() const {
    return ok_ ? Status::Ok() : Internal(std::string("sqlite begin: ") + sqlite3_errmsg(db_));
  }
  Status Commit() {
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      return Internal(std::string("sqlite commit: ") + sqlite3_errmsg(db_));
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  sqlite3* db_;
  bool ok_ = false;
  bool committed_ = false;
};

const char kJobColumns[] =
    "id, seq, name, submission_id, spec_yaml, token, job_dir, state, gpus, priority, attempt, "
    "restarts, max_restarts, grace_seconds, submitted_at, started_at, finished_at, message, "
    "devices, step, total_steps, loss, clips_per_second, step_seconds, last_checkpoint_step, "
    "progress_updated_at, hang_timeout_seconds, checkpoint_dir, mfu_ratio, "
    "rendezvous_timeout_seconds, launcher, submitted_by, learning_rate, eval_loss, eval_step, "
    "validation_seconds, after_jobs, after_any, labels, preempted_by, "
    "COALESCE((SELECT cluster_job FROM attempts WHERE attempts.job_id = jobs.id AND "
    "attempts.attempt = jobs.attempt), '')";

// MetricValues::eval_by_timestep in its TEXT column: [[timestep, loss], ...]; "" for none.
std::string EvalByTimestepJson(const std::vector<std::pair<int64_t, double>>& losses) {
  if (losses.empty()) return "";
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [t, loss] : losses) j.push_back({t, loss});
  return j.dump();
}

std::vector<std::pair<int64_t, double>> EvalByTimestepFromJson(const std::string& text) {
  std::vector<std::pair<int64_t, double>> out;
  if (text.empty()) return out;
  try {
    for (const auto& pair : nlohmann::json::parse(text)) {
      out.emplace_back(pair.at(0).get<int64_t>(), pair.at(1).get<double>());
    }
  } catch (const nlohmann::json::exception&) {
    out.clear();  // written by this file only; a damaged value reads as none
  }
  return out;
}

// JobRecord::labels in its TEXT column: a JSON object of strings.
std::string LabelsJson(const std::map<std::string, std::string>& labels) {
  return nlohmann::json(labels).dump();
}

std::map<std::string, std::string> LabelsFromJson(const std::string& text) {
  std::map<std::string, std::string> out;
  try {
    const nlohmann::json parsed = nlohmann::json::parse(text);
    for (const auto& [k, v] : parsed.items()) out[k] = v.get<std::string>();
  } catch (const nlohmann::json::exception&) {
    out.clear();  // written by this file only; a damaged value reads as none
  }
  return out;
}

JobRecord ReadJob(const Stmt& s) {
  JobRecord j;
  j.id = s.Text(0);
  j.seq = s.Int(1);
  j.name = s.Text(2);
  j.submission_id = s.IsNull(3) ? "" : s.Text(3);
  j.spec_yaml = s.Text(4);
  j.token = s.Text(5);
  j.job_dir = s.Text(6);
  j.state = static_cast<JobState>(s.Int(7));
  j.gpus = static_cast<int>(s.Int(8));
  j.priority = static_cast<int>(s.Int(9));
  j.attempt = static_cast<int>(s.Int(10));
  j.restarts = static_cast<int>(s.Int(11));
  j.max_restarts = static_cast<int>(s.Int(12));
  j.grace_seconds = s.Double(13);
  j.submitted_at = s.Double(14);
  j.started_at = s.Double(15);
  j.finished_at = s.Double(16);
  j.message = s.Text(17);
  j.devices = SplitDevices(s.Text(18));
  j.progress.step = s.Int(19);
  j.progress.total_steps = s.Int(20);
  j.progress.loss = s.Double(21);
  j.progress.clips_per_second = s.Double(22);
  j.progress.step_seconds = s.Double(23);
  j.progress.last_checkpoint_step = s.Int(24);
  j.progress.updated_at = s.Double(25);
  j.hang_timeout_seconds = s.Double(26);
  j.checkpoint_dir = s.Text(27);
  j.progress.mfu_ratio = s.Double(28);
  j.rendezvous_timeout_seconds = s.Double(29);
  j.launcher = SpecEnumValue<LauncherKind>(s.Text(30)).value_or(LauncherKind::kLocal);
  j.submitted_by = s.Text(31);
  j.progress.learning_rate = s.Double(32);
  j.progress.eval_loss = s.Double(33);
  j.progress.eval_step = s.Int(34);
  j.progress.validation_seconds = s.Double(35);
  j.after = SplitDevices(s.Text(36));
  j.after_any = s.Int(37) != 0;
  j.labels = LabelsFromJson(s.Text(38));
  j.preempted_by = s.Text(39);
  j.cluster_job = s.Text(40);
  return j;
}

Result<std::vector<JobRecord>> CollectJobs(Stmt& s) {
  std::vector<JobRecord> out;
  while (true) {
    auto row = s.Step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    out.push_back(ReadJob(s));
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Store>> Store::Open(const std::string& path, const Clock* clock) {
  // The owner's alone (SQLite gives its -wal and -shm files the same mode): it holds every job's
  // spec, events and the worker-token hashes.
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (fchmod(fd, 0600) != 0) spdlog::warn("{}: chmod 0600: {}", path, strerror(errno));
    close(fd);
  }
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Unavailable("cannot open database " + path + ": " + msg);
  }
  std::unique_ptr<Store> store(new Store(db));
  store->clock_ = clock;
  sqlite3_busy_timeout(db, 5000);
  ADCTL_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  ADCTL_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL"));
  ADCTL_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON"));
  ADCTL_RETURN_IF_ERROR(store->Migrate());
  return store;
}

Store::~Store() { sqlite3_close(db_); }

Status Store::SetWritesFail(bool fail) {
  std::lock_guard<std::mutex> lock(mu_);
  return Exec(fail ? "PRAGMA query_only=ON" : "PRAGMA query_only=OFF");
}

Status Store::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Internal("sqlite: " + msg);
  }
  return Status::Ok();
}

Status Store::Migrate() {
  std::lock_guard<std::mutex> lock(mu_);
  int version = 0;
  {
    Stmt s(db_, "PRAGMA user_version");
    ADCTL_RETURN_IF_ERROR(s.prepare_status());
    auto row = s.Step();
    if (!row.ok()) return row.status();
    version = static_cast<int>(s.Int(0));
  }
  const int latest = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));
  if (version > latest) {
    return FailedPrecondition("database schema version " + std::to_string(version) +
                              " is newer than this adctld (" + std::to_string(latest) + ")");
  }
  for (int v = version; v < latest; ++v) {
    Txn txn(db_);
    ADCTL_RETURN_IF_ERROR(txn.begin_status());
    ADCTL_RETURN_IF_ERROR(Exec(kMigrations[v]));
    ADCTL_RETURN_IF_ERROR(Exec("PRAGMA user_version=" + std::to_string(v + 1)));
    ADCTL_RETURN_IF_ERROR(txn.Commit());
  }
  schema_version_ = latest;
  return Status::Ok();
}

Status Store::InsertJob(const JobRecord& j, const std::string& by) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  Stmt s(db_,
         "INSERT INTO jobs (id, name, submission_id, spec_yaml, token, job_dir, state, gpus, "
         "priority, max_restarts, grace_seconds, submitted_at, message, total_steps, "
         "hang_timeout_seconds, checkpoint_dir, rendezvous_timeout_seconds, launcher, "
         "submitted_by, after_jobs, after_any, labels) "
         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(j.id).Bind(j.name);
  if (j.submission_id.empty()) {
    s.BindNull();
  } else {
    s.Bind(j.submission_id);
  }
  s.Bind(j.spec_yaml).Bind(j.token).Bind(j.job_dir).Bind(static_cast<int>(j.state));
  s.Bind(j.gpus).Bind(j.priority).Bind(j.max_restarts).Bind(j.grace_seconds);
  s.Bind(j.submitted_at).Bind(j.message).Bind(j.progress.total_steps);
  s.Bind(j.hang_timeout_seconds).Bind(j.checkpoint_dir).Bind(j.rendezvous_timeout_seconds);
  s.Bind(Name(j.launcher)).Bind(by).Bind(JoinDevices(j.after)).Bind(j.after_any ? 1 : 0);
  s.Bind(LabelsJson(j.labels));
  ADCTL_RETURN_IF_ERROR(s.Run());
  EventRecord e;
  e.job_id = j.id;
  e.time = j.submitted_at;
  e.kind = "submitted";
  e.to_state = j.state;
  e.message =
      "submitted" + (by.empty() ? std::string() : " by " + by) + ": " + std::to_string(j.gpus) +
      " rank(s), priority " + std::to_string(j.priority) +
      (j.after.empty() ? std::string()
                       : (j.after_any ? ", after any end of " : ", after ") + JoinDevices(j.after));
  auto id = AddEventLocked(e);
  if (!id.ok()) return id.status();
  return txn.Commit();
}

Result<JobRecord> Store::GetJobLocked(const std::string& id) {
  Stmt s(db_, (std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?").c_str());
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(id);
  auto row = s.Step();
  if (!row.ok()) return row.status();
  if (!row.value()) return NotFound("job " + id + ": not found");
  return ReadJob(s);
}

Result<JobRecord> Store::GetJob(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return GetJobLocked(id);
}

Result<std::optional<JobRecord>> Store::FindJobBySubmissionId(const std::string& sid) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         (std::string("SELECT ") + kJobColumns + " FROM jobs WHERE submission_id = ?").c_str());
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(sid);
  auto row = s.Step();
  if (!row.ok()) return row.status();
  if (!row.value()) return std::optional<JobRecord>();
  return std::optional<JobRecord>(ReadJob(s));
}

Status CheckLabels(const std::map<std::string, std::string>& labels, const std::string& field) {
  if (labels.size() > 32) {
    return InvalidArgument(field + ": at most 32 labels, got " + std::to_string(labels.size()));
  }
  for (const auto& [key, value] : labels) {
    const bool key_ok =
        !key.empty() && key.size() <= 63 && std::all_of(key.begin(), key.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' ||
                 c == '/';
        });
    if (!key_ok) {
      return InvalidArgument(field + ": key '" + key.substr(0, 64) +
                             "' must be 1-63 characters of letters, digits, '_', '.', '-', '/'");
    }
    if (value.size() > 256 || value.find('\0') != std::string::npos) {
      return InvalidArgument(field + ": the value of '" + key +
                             "' must be at most 256 bytes without NUL");
    }
  }
  return Status::Ok();
}

Result<std::vector<JobRecord>> Store::ListJobs(const std::vector<JobState>& states, int limit,
                                               int64_t before_seq, const JobSelector& selector) {
  ADCTL_RETURN_IF_ERROR(CheckLabels(selector.labels, "labels"));
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE seq < ?";
  if (!states.empty()) {
    sql += " AND state IN (";
    for (size_t i = 0; i < states.size(); ++i) sql += i ? ",?" : "?";
    sql += ")";
  }
  // A label is the JSON member of its key (keys are checked at submit: no quote can end the
  // path early).
  for (size_t i = 0; i < selector.labels.size(); ++i) sql += " AND json_extract(labels, ?) IS ?";
  if (!selector.submitted_by.empty()) sql += " AND submitted_by = ?";
  sql += " ORDER BY seq DESC LIMIT ?";
  Stmt s(db_, sql.c_str());
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(before_seq > 0 ? before_seq : INT64_MAX);
  for (JobState st : states) s.Bind(static_cast<int>(st));
  for (const auto& [key, value] : selector.labels) s.Bind("$.\"" + key + "\"").Bind(value);
  if (!selector.submitted_by.empty()) s.Bind(selector.submitted_by);
  s.Bind(limit > 0 ? limit : -1);
  return CollectJobs(s);
}

Result<std::vector<JobRecord>> Store::ListActiveJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, (std::string("SELECT ") + kJobColumns +
               " FROM jobs WHERE state NOT IN (?,?,?) ORDER BY seq ASC")
                  .c_str());
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(static_cast<int>(JobState::kSucceeded))
      .Bind(static_cast<int>(JobState::kFailed))
      .Bind(static_cast<int>(JobState::kCancelled));
  return CollectJobs(s);
}

Result<JobRecord> Store::Transition(const std::string& id, std::optional<JobState> expected_from,
                                    JobState to, const std::string& message,
                                    const TransitionChanges& c) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  auto job = GetJobLocked(id);
  if (!job.ok()) return job.status();
  const JobState from = job->state;
  if (expected_from && *expected_from != from) {
    return FailedPrecondition("job " + id + " is " + JobStateName(from) + ", expected " +
                              JobStateName(*expected_from));
  }
  Status legal = CheckTransition(from, to);
  if (!legal.ok()) return FailedPrecondition("job " + id + ": " + legal.message());

  const double now = clock_->Now();
  JobRecord j = job.value();
  j.state = to;
  j.message = message;
  if (c.attempt) j.attempt = *c.attempt;
  if (c.devices) j.devices = *c.devices;
  if (c.restarts) j.restarts = *c.restarts;
  if (c.gpus) j.gpus = *c.gpus;
  if (c.spec_yaml) j.spec_yaml = *c.spec_yaml;
  if (c.started_at) j.started_at = *c.started_at;
  if (c.preempted_by) j.preempted_by = *c.preempted_by;
  if (IsTerminal(to)) j.finished_at = now;

  Stmt u(db_,
         "UPDATE jobs SET state=?, message=?, attempt=?, devices=?, restarts=?, gpus=?, "
         "spec_yaml=?, started_at=?, finished_at=?, preempted_by=? WHERE id=?");
  ADCTL_RETURN_IF_ERROR(u.prepare_status());
  u.Bind(static_cast<int>(to)).Bind(j.message).Bind(j.attempt).Bind(JoinDevices(j.devices));
  u.Bind(j.restarts).Bind(j.gpus).Bind(j.spec_yaml).Bind(j.started_at).Bind(j.finished_at);
  u.Bind(j.preempted_by).Bind(id);
  ADCTL_RETURN_IF_ERROR(u.Run());

  if (!c.end_attempt_reason.empty() && job->attempt > 0) {
    Stmt a(db_,
           "UPDATE attempts SET ended_at=?, end_reason=? WHERE job_id=? AND attempt=? "
           "AND ended_at=0");
    ADCTL_RETURN_IF_ERROR(a.prepare_status());
    a.Bind(now).Bind(c.end_attempt_reason).Bind(id).Bind(job->attempt);
    ADCTL_RETURN_IF_ERROR(a.Run());
  }
  if (c.attempt && *c.attempt != job->attempt) {
    Stmt a(db_,
           "INSERT INTO attempts (job_id, attempt, world_size, devices, started_at, token_sha256) "
           "VALUES (?,?,?,?,?,?)");
    ADCTL_RETURN_IF_ERROR(a.prepare_status());
    a.Bind(id).Bind(*c.attempt).Bind(j.gpus).Bind(JoinDevices(j.devices)).Bind(now);
    a.Bind(c.attempt_token_sha256);
    ADCTL_RETURN_IF_ERROR(a.Run());
  }

  EventRecord e;
  e.job_id = id;
  e.attempt = j.attempt;
  e.time = now;
  e.kind = "transition";
  e.from_state = from;
  e.to_state = to;
  e.level = to == JobState::kFailed ? "error" : "info";
  e.message = message;
  auto eid = AddEventLocked(e);
  if (!eid.ok()) return eid.status();
  ADCTL_RETURN_IF_ERROR(txn.Commit());
  return j;
}

Result<JobRecord> Store::SetPriority(const std::string& id, int priority,
                                     const std::string& spec_yaml, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  auto job = GetJobLocked(id);
  if (!job.ok()) return job.status();
  if (IsTerminal(job->state)) {
    return FailedPrecondition("job " + id + " is " + JobStateName(job->state) +
                              "; an ended job has no priority to change");
  }
  Stmt u(db_, "UPDATE jobs SET priority=?, spec_yaml=? WHERE id=?");
  ADCTL_RETURN_IF_ERROR(u.prepare_status());
  u.Bind(priority).Bind(spec_yaml).Bind(id);
  ADCTL_RETURN_IF_ERROR(u.Run());
  EventRecord e;
  e.job_id = id;
  e.attempt = job->attempt;
  e.time = clock_->Now();
  e.kind = "priority";
  e.level = "info";
  e.message = message;
  auto eid = AddEventLocked(e);
  if (!eid.ok()) return eid.status();
  ADCTL_RETURN_IF_ERROR(txn.Commit());
  JobRecord j = job.value();
  j.priority = priority;
  j.spec_yaml = spec_yaml;
  return j;
}

Result<std::vector<std::pair<JobState, int64_t>>> Store::CountJobsByState() {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  std::vector<std::pair<JobState, int64_t>> out;
  while (true) {
    ADCTL_ASSIGN_ROW(row, s.Step());
    if (!row) break;
    out.emplace_back(static_cast<JobState>(s.Int(0)), s.Int(1));
  }
  return out;
}

Result<AttemptRecord> Store::GetAttempt(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "SELECT world_size, devices, started_at, ended_at, end_reason, token_sha256, cluster_job "
         "FROM attempts WHERE job_id=? AND attempt=?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(attempt);
  ADCTL_ASSIGN_ROW(row, s.Step());
  if (!row) {
    return NotFound("job " + job_id + ": attempt " + std::to_string(attempt) + " not found");
  }
  AttemptRecord a;
  a.job_id = job_id;
  a.attempt = attempt;
  a.world_size = static_cast<int>(s.Int(0));
  a.devices = SplitDevices(s.Text(1));
  a.started_at = s.Double(2);
  a.ended_at = s.Double(3);
  a.end_reason = s.Text(4);
  a.token_sha256 = s.Text(5);
  a.cluster_job = s.Text(6);
  return a;
}

Status Store::SetAttemptClusterJob(const std::string& job_id, int attempt,
                                   const std::string& cluster_job) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "UPDATE attempts SET cluster_job=? WHERE job_id=? AND attempt=?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(cluster_job).Bind(job_id).Bind(attempt);
  return s.Run();
}

Status Store::UpsertRank(const RankRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "INSERT OR REPLACE INTO ranks (job_id, attempt, rank, pgid, pgid_start_time, "
         "worker_pid, host, device, exited, exit_code, exit_signal, last_heartbeat) "
         "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(r.job_id).Bind(r.attempt).Bind(r.rank).Bind(r.pgid);
  s.Bind(static_cast<int64_t>(r.pgid_start_time)).Bind(r.worker_pid).Bind(r.host).Bind(r.device);
  s.Bind(r.exited ? 1 : 0).Bind(r.exit_code).Bind(r.exit_signal).Bind(r.last_heartbeat);
  return s.Run();
}

Status Store::RecordRankWorker(const std::string& job_id, int attempt, int rank, int worker_pid,
                               const std::string& host, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "UPDATE ranks SET worker_pid=?, host=?, last_heartbeat=? "
         "WHERE job_id=? AND attempt=? AND rank=?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(worker_pid).Bind(host).Bind(now).Bind(job_id).Bind(attempt).Bind(rank);
  return s.Run();
}

Status Store::RecordHeartbeat(const std::string& job_id, int attempt, int rank, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "UPDATE ranks SET last_heartbeat=? WHERE job_id=? AND attempt=? AND rank=?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(now).Bind(job_id).Bind(attempt).Bind(rank);
  return s.Run();
}

Status Store::RecordRankExit(const std::string& job_id, int attempt, int rank, int exit_code,
                             int exit_signal) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "UPDATE ranks SET exited=1, exit_code=?, exit_signal=? "
         "WHERE job_id=? AND attempt=? AND rank=?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(exit_code).Bind(exit_signal).Bind(job_id).Bind(attempt).Bind(rank);
  return s.Run();
}

Result<std::vector<RankRecord>> Store::ListRanks(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "SELECT rank, pgid, pgid_start_time, worker_pid, host, device, exited, exit_code, "
         "exit_signal, last_heartbeat FROM ranks WHERE job_id=? AND attempt=? ORDER BY rank");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(attempt);
  std::vector<RankRecord> out;
  while (true) {
    ADCTL_ASSIGN_ROW(row, s.Step());
    if (!row) break;
    RankRecord r;
    r.job_id = job_id;
    r.attempt = attempt;
    r.rank = static_cast<int>(s.Int(0));
    r.pgid = static_cast<int>(s.Int(1));
    r.pgid_start_time = static_cast<uint64_t>(s.Int(2));
    r.worker_pid = static_cast<int>(s.Int(3));
    r.host = s.Text(4);
    r.device = s.Text(5);
    r.exited = s.Int(6) != 0;
    r.exit_code = static_cast<int>(s.Int(7));
    r.exit_signal = static_cast<int>(s.Int(8));
    r.last_heartbeat = s.Double(9);
    out.push_back(r);
  }
  return out;
}

Result<int64_t> Store::AddEventLocked(const EventRecord& e) {
  Stmt s(db_,
         "INSERT INTO events (job_id, attempt, time, kind, from_state, to_state, level, message)"
         " VALUES (?,?,?,?,?,?,?,?)");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(e.job_id).Bind(e.attempt).Bind(e.time > 0 ? e.time : clock_->Now()).Bind(e.kind);
  if (e.from_state) {
    s.Bind(static_cast<int>(*e.from_state));
  } else {
    s.BindNull();
  }
  if (e.to_state) {
    s.Bind(static_cast<int>(*e.to_state));
  } else {
    s.BindNull();
  }
  s.Bind(e.level).Bind(e.message);
  ADCTL_RETURN_IF_ERROR(s.Run());
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Result<int64_t> Store::AddEvent(const EventRecord& e) {
  std::lock_guard<std::mutex> lock(mu_);
  return AddEventLocked(e);
}

Result<std::vector<EventRecord>> Store::ListEvents(const std::string& job_id, int64_t after_id,
                                                   int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "SELECT id, attempt, time, kind, from_state, to_state, level, message FROM events "
         "WHERE job_id=? AND id>? ORDER BY id LIMIT ?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(after_id).Bind(limit > 0 ? limit : -1);
  std::vector<EventRecord> out;
  while (true) {
    ADCTL_ASSIGN_ROW(row, s.Step());
    if (!row) break;
    EventRecord e;
    e.id = s.Int(0);
    e.job_id = job_id;
    e.attempt = static_cast<int>(s.Int(1));
    e.time = s.Double(2);
    e.kind = s.Text(3);
    if (!s.IsNull(4)) e.from_state = static_cast<JobState>(s.Int(4));
    if (!s.IsNull(5)) e.to_state = static_cast<JobState>(s.Int(5));
    e.level = s.Text(6);
    e.message = s.Text(7);
    out.push_back(e);
  }
  return out;
}

Result<std::string> Store::LastRankError(const std::string& job_id, int attempt, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  Stmt s(db_,
         "SELECT message FROM events WHERE job_id=? AND attempt=? AND kind='worker' AND "
         "level='error' AND substr(message, 1, ?)=? ORDER BY id DESC LIMIT 1");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id)
      .Bind(static_cast<int64_t>(attempt))
      .Bind(static_cast<int64_t>(prefix.size()))
      .Bind(prefix);
  ADCTL_ASSIGN_ROW(row, s.Step());
  if (!row) return std::string();
  return s.Text(0).substr(prefix.size());
}

Status Store::AddMetrics(const std::vector<MetricRecord>& points) {
  if (points.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  // A re-sent batch (client retry after a lost reply) must not duplicate rows.
  static const std::string insert = [] {
    std::string columns = "job_id, attempt, rank, eval_by_timestep", values = "?,?,?,?";
    MetricRecord m;
    ForEachMetricValue(m, [&](const char* name, auto&) {
      columns += std::string(", ") + name;
      values += ",?";
    });
    return "INSERT OR IGNORE INTO metrics (" + columns + ") VALUES (" + values + ")";
  }();
  for (const MetricRecord& m : points) {
    Stmt s(db_, insert.c_str());
    ADCTL_RETURN_IF_ERROR(s.prepare_status());
    s.Bind(m.job_id).Bind(m.attempt).Bind(m.rank).Bind(EvalByTimestepJson(m.eval_by_timestep));
    ForEachMetricValue(m, [&](const char*, const auto& v) { s.Bind(v); });
    ADCTL_RETURN_IF_ERROR(s.Run());
    if (m.rank == 0) {
      Stmt p(db_,
             "UPDATE jobs SET step=?, total_steps=?, loss=?, clips_per_second=?, step_seconds=?, "
             "progress_updated_at=?, mfu_ratio=? WHERE id=?");
      ADCTL_RETURN_IF_ERROR(p.prepare_status());
      p.Bind(m.step).Bind(m.total_steps).Bind(m.loss).Bind(m.clips_per_second);
      p.Bind(m.step_seconds).Bind(m.time).Bind(m.mfu_ratio).Bind(m.job_id);
      ADCTL_RETURN_IF_ERROR(p.Run());
      Stmt lr(db_, "UPDATE jobs SET learning_rate=? WHERE id=?");
      ADCTL_RETURN_IF_ERROR(lr.prepare_status());
      lr.Bind(m.learning_rate).Bind(m.job_id);
      ADCTL_RETURN_IF_ERROR(lr.Run());
      if (m.eval_loss >= 0) {
        Stmt e(db_, "UPDATE jobs SET eval_loss=?, eval_step=? WHERE id=?");
        ADCTL_RETURN_IF_ERROR(e.prepare_status());
        e.Bind(m.eval_loss).Bind(m.step).Bind(m.job_id);
        ADCTL_RETURN_IF_ERROR(e.Run());
      }
    }
  }
  return txn.Commit();
}

Result<int64_t> Store::ThinMetrics(int64_t max_per_rank) {
  if (max_per_rank < 4) return InvalidArgument("metric history limit must be at least 4 points");
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::tuple<std::string, int, int64_t>> over;  // job, rank, points
  {
    Stmt s(db_,
           "SELECT job_id, rank, COUNT(*) FROM metrics GROUP BY job_id, rank HAVING COUNT(*) > ?");
    ADCTL_RETURN_IF_ERROR(s.prepare_status());
    s.Bind(max_per_rank);
    while (true) {
      ADCTL_ASSIGN_ROW(row, s.Step());
      if (!row) break;
      over.emplace_back(s.Text(0), static_cast<int>(s.Int(1)), s.Int(2));
    }
  }
  int64_t removed = 0;
  for (const auto& [job_id, rank, points] : over) {
    // In insertion order (attempts replay steps after a restart): of the older half, the
    // even-numbered points go; the first one (number 1) stays.
    Stmt d(
        db_,
        "DELETE FROM metrics WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER() OVER "
        "(ORDER BY id) AS n FROM metrics WHERE job_id=? AND rank=?) WHERE n <= ? AND n % 2 = 0)");
    ADCTL_RETURN_IF_ERROR(d.prepare_status());
    d.Bind(job_id).Bind(rank).Bind(points / 2);
    ADCTL_RETURN_IF_ERROR(d.Run());
    removed += sqlite3_changes(db_);
  }
  return removed;
}

namespace {

// The metric columns Store reads, after "SELECT id, attempt, rank, eval_by_timestep".
std::string MetricSelect() {
  std::string sql = "SELECT id, attempt, rank, eval_by_timestep";
  MetricRecord columns;
  ForEachMetricValue(columns, [&](const char* name, auto&) { sql += std::string(", ") + name; });
  return sql;
}

Result<std::vector<MetricRecord>> ReadMetricRows(Stmt& s, const std::string& job_id) {
  std::vector<MetricRecord> out;
  while (true) {
    ADCTL_ASSIGN_ROW(row, s.Step());
    if (!row) break;
    MetricRecord m;
    m.id = s.Int(0);
    m.job_id = job_id;
    m.attempt = static_cast<int>(s.Int(1));
    m.rank = static_cast<int>(s.Int(2));
    m.eval_by_timestep = EvalByTimestepFromJson(s.Text(3));
    int column = 4;
    ForEachMetricValue(m, [&](const char*, auto& v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) {
        v = s.Double(column++);
      } else {
        v = s.Int(column++);
      }
    });
    out.push_back(m);
  }
  return out;
}

}  // namespace

Result<std::vector<MetricRecord>> Store::ListMetrics(const std::string& job_id, int64_t after_id,
                                                     std::optional<int> rank, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = MetricSelect() + " FROM metrics WHERE job_id=? AND id>?";
  if (rank) sql += " AND rank=?";
  sql += " ORDER BY id LIMIT ?";
  Stmt s(db_, sql.c_str());
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(after_id);
  if (rank) s.Bind(*rank);
  s.Bind(limit > 0 ? limit : -1);
  return ReadMetricRows(s, job_id);
}

Result<std::vector<MetricRecord>> Store::LatestMetricsPerRank(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string sql = MetricSelect() +
                          " FROM metrics WHERE id IN (SELECT MAX(id) FROM metrics WHERE "
                          "job_id=? GROUP BY rank) ORDER BY rank";
  Stmt s(db_, sql.c_str());
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id);
  return ReadMetricRows(s, job_id);
}

Status Store::AddCheckpoint(const CheckpointRecord& c) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  Stmt s(db_,
         "INSERT OR REPLACE INTO checkpoints (job_id, step, attempt, path, size_bytes, "
         "save_seconds, stall_seconds, created_at) VALUES (?,?,?,?,?,?,?,?)");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(c.job_id).Bind(c.step).Bind(c.attempt).Bind(c.path).Bind(c.size_bytes);
  s.Bind(c.save_seconds)
      .Bind(c.stall_seconds)
      .Bind(c.created_at > 0 ? c.created_at : clock_->Now());
  ADCTL_RETURN_IF_ERROR(s.Run());
  Stmt p(db_, "UPDATE jobs SET last_checkpoint_step=MAX(last_checkpoint_step, ?) WHERE id=?");
  ADCTL_RETURN_IF_ERROR(p.prepare_status());
  p.Bind(c.step).Bind(c.job_id);
  ADCTL_RETURN_IF_ERROR(p.Run());
  return txn.Commit();
}

Status Store::AddSamples(const std::vector<SampleRecord>& samples) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  for (const SampleRecord& r : samples) {
    Stmt s(db_,
           "INSERT OR REPLACE INTO samples (job_id, step, idx, attempt, prompt, mp4, gif, "
           "render_seconds, created_at) VALUES (?,?,?,?,?,?,?,?,?)");
    ADCTL_RETURN_IF_ERROR(s.prepare_status());
    s.Bind(r.job_id).Bind(r.step).Bind(static_cast<int64_t>(r.index)).Bind(r.attempt);
    s.Bind(r.prompt).Bind(r.mp4).Bind(r.gif).Bind(r.render_seconds);
    s.Bind(r.created_at > 0 ? r.created_at : clock_->Now());
    ADCTL_RETURN_IF_ERROR(s.Run());
  }
  // The job's latest validation took the grid's render time (the whole render), or its
  // samples' sum without a grid: what the ETA adds per render to come.
  std::map<std::string, double> seconds, grid;
  for (const SampleRecord& r : samples) {
    if (r.index < 0) {
      grid[r.job_id] = std::max(grid[r.job_id], r.render_seconds);
    } else {
      seconds[r.job_id] += std::max(0.0, r.render_seconds);
    }
  }
  for (const auto& [job_id, whole] : grid) seconds[job_id] = whole;
  for (const auto& [job_id, total] : seconds) {
    Stmt s(db_, "UPDATE jobs SET validation_seconds=? WHERE id=?");
    ADCTL_RETURN_IF_ERROR(s.prepare_status());
    s.Bind(total).Bind(job_id);
    ADCTL_RETURN_IF_ERROR(s.Run());
  }
  return txn.Commit();
}

Result<std::vector<SampleRecord>> Store::ListSamples(const std::string& job_id, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "SELECT step, idx, attempt, prompt, mp4, gif, render_seconds, created_at FROM samples "
         "WHERE job_id=? AND (?=0 OR step=?) ORDER BY step, idx < 0, idx");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(step).Bind(step);
  std::vector<SampleRecord> out;
  while (true) {
    ADCTL_ASSIGN_ROW(row, s.Step());
    if (!row) break;
    SampleRecord r;
    r.job_id = job_id;
    r.step = s.Int(0);
    r.index = static_cast<int>(s.Int(1));
    r.attempt = static_cast<int>(s.Int(2));
    r.prompt = s.Text(3);
    r.mp4 = s.Text(4);
    r.gif = s.Text(5);
    r.render_seconds = s.Double(6);
    r.created_at = s.Double(7);
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<CheckpointRecord>> Store::ListCheckpoints(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_,
         "SELECT step, attempt, path, size_bytes, save_seconds, created_at, stall_seconds "
         "FROM checkpoints "
         "WHERE job_id=? ORDER BY step");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id);
  std::vector<CheckpointRecord> out;
  while (true) {
    ADCTL_ASSIGN_ROW(row, s.Step());
    if (!row) break;
    CheckpointRecord c;
    c.job_id = job_id;
    c.step = s.Int(0);
    c.attempt = static_cast<int>(s.Int(1));
    c.path = s.Text(2);
    c.size_bytes = s.Int(3);
    c.save_seconds = s.Double(4);
    c.created_at = s.Double(5);
    c.stall_seconds = s.Double(6);
    out.push_back(c);
  }
  return out;
}

Status Store::SetCheckpointPin(const std::string& job_id, int64_t step, bool pinned,
                               const std::string& by) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, pinned ? "INSERT OR REPLACE INTO checkpoint_pins (job_id, step, pinned_at, "
                       "pinned_by) VALUES (?,?,?,?)"
                     : "DELETE FROM checkpoint_pins WHERE job_id=? AND step=?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(step);
  if (pinned) s.Bind(clock_->Now()).Bind(by);
  return s.Run();
}

Result<std::set<int64_t>> Store::ListCheckpointPins(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT step FROM checkpoint_pins WHERE job_id=? ORDER BY step");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id);
  std::set<int64_t> out;
  while (true) {
    ADCTL_ASSIGN_ROW(row, s.Step());
    if (!row) break;
    out.insert(s.Int(0));
  }
  return out;
}

Status Store::KvSet(const std::string& job_id, int attempt, const std::string& key,
                    const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "INSERT OR REPLACE INTO kv (job_id, attempt, key, value) VALUES (?,?,?,?)");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(attempt).Bind(key).BindBlob(value);
  return s.Run();
}

Result<std::optional<std::string>> Store::KvGet(const std::string& job_id, int attempt,
                                                const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  Stmt s(db_, "SELECT value FROM kv WHERE job_id=? AND attempt=? AND key=?");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(job_id).Bind(attempt).Bind(key);
  ADCTL_ASSIGN_ROW(row, s.Step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(s.Text(0));
}

}  // namespace adctl
