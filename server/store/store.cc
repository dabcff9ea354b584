// Store: opening and migrating the database, jobs (insert, look-ups, listings), their state
// transitions and the attempts rows they open and close. The schema is in store_schema.cc; ranks,
// events, metrics, checkpoints, samples, pins and the rendezvous KV in store_records.cc.
#include "server/store/store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/store/statement.h"
#include "server/store/store_schema.h"

namespace adctl {

namespace {

using store_internal::Execute;
using store_internal::NoBinds;
using store_internal::Query;
using store_internal::QueryRow;
using store_internal::Stmt;
using store_internal::Txn;

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

// Every column of a job's row (ReadJob reads them by name), with the current attempt's cluster
// job: a new column needs no list of its own here.
const char kJobColumns[] =
    "jobs.*, COALESCE((SELECT cluster_job FROM attempts WHERE attempts.job_id = jobs.id AND "
    "attempts.attempt = jobs.attempt), '') AS cluster_job";

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
  j.id = s.Text("id");
  j.seq = s.Int("seq");
  j.name = s.Text("name");
  j.submission_id = s.IsNull("submission_id") ? "" : s.Text("submission_id");
  j.spec_yaml = s.Text("spec_yaml");
  j.token = s.Text("token");
  j.job_dir = s.Text("job_dir");
  j.state = static_cast<JobState>(s.Int("state"));
  j.gpus = static_cast<int>(s.Int("gpus"));
  j.priority = static_cast<int>(s.Int("priority"));
  j.attempt = static_cast<int>(s.Int("attempt"));
  j.restarts = static_cast<int>(s.Int("restarts"));
  j.max_restarts = static_cast<int>(s.Int("max_restarts"));
  j.grace_seconds = s.Double("grace_seconds");
  j.submitted_at = s.Double("submitted_at");
  j.started_at = s.Double("started_at");
  j.finished_at = s.Double("finished_at");
  j.message = s.Text("message");
  j.devices = SplitDevices(s.Text("devices"));
  ForEachProgressMetric(j.progress, [&](const char* column, auto& v) { s.Read(column, &v); });
  j.progress.last_checkpoint_step = s.Int("last_checkpoint_step");
  j.progress.updated_at = s.Double("progress_updated_at");
  j.hang_timeout_seconds = s.Double("hang_timeout_seconds");
  j.checkpoint_dir = s.Text("checkpoint_dir");
  j.rendezvous_timeout_seconds = s.Double("rendezvous_timeout_seconds");
  j.launcher = SpecEnumValue<LauncherKind>(s.Text("launcher")).value_or(LauncherKind::kLocal);
  j.submitted_by = s.Text("submitted_by");
  j.progress.eval_loss = s.Double("eval_loss");
  j.progress.eval_step = s.Int("eval_step");
  j.progress.validation_seconds = s.Double("validation_seconds");
  j.after = SplitDevices(s.Text("after_jobs"));
  j.after_any = s.Int("after_any") != 0;
  j.labels = LabelsFromJson(s.Text("labels"));
  j.preempted_by = s.Text("preempted_by");
  j.cluster_job = s.Text("cluster_job");
  return j;
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
  auto version = QueryRow(db_, "PRAGMA user_version", NoBinds,
                          [](const Stmt& s) { return static_cast<int>(s.Int("user_version")); });
  if (!version.ok()) return version.status();
  const int from = version->value_or(0);
  const std::vector<const char*>& migrations = store_internal::Migrations();
  const int latest = static_cast<int>(migrations.size());
  if (from > latest) {
    return FailedPrecondition("database schema version " + std::to_string(from) +
                              " is newer than this adctld (" + std::to_string(latest) + ")");
  }
  for (int v = from; v < latest; ++v) {
    Txn txn(db_);
    ADCTL_RETURN_IF_ERROR(txn.begin_status());
    ADCTL_RETURN_IF_ERROR(Exec(migrations[v]));
    ADCTL_RETURN_IF_ERROR(Exec("PRAGMA user_version=" + std::to_string(v + 1)));
    ADCTL_RETURN_IF_ERROR(txn.Commit());
  }
  // Then a column for each metric value the table lacks (a metric added since): no migration.
  auto columns = Query(db_, "PRAGMA table_info(metrics)", NoBinds,
                       [](const Stmt& s) { return s.Text("name"); });
  if (!columns.ok()) return columns.status();
  const std::string add = store_internal::MissingMetricColumns({columns->begin(), columns->end()});
  if (!add.empty()) {
    Txn txn(db_);
    ADCTL_RETURN_IF_ERROR(txn.begin_status());
    ADCTL_RETURN_IF_ERROR(Exec(add));
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
  auto job = QueryRow(
      db_, std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ?",
      [&](Stmt& s) { s.Bind(id); }, ReadJob);
  if (!job.ok()) return job.status();
  if (!job->has_value()) return NotFound("job " + id + ": not found");
  return std::move(**job);
}

Result<JobRecord> Store::GetJob(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return GetJobLocked(id);
}

Result<std::optional<JobRecord>> Store::FindJobBySubmissionId(const std::string& sid) {
  std::lock_guard<std::mutex> lock(mu_);
  return QueryRow(
      db_, std::string("SELECT ") + kJobColumns + " FROM jobs WHERE submission_id = ?",
      [&](Stmt& s) { s.Bind(sid); }, ReadJob);
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
  const auto bind = [&](Stmt& s) {
    s.Bind(before_seq > 0 ? before_seq : INT64_MAX);
    for (JobState st : states) s.Bind(static_cast<int>(st));
    for (const auto& [key, value] : selector.labels) s.Bind("$.\"" + key + "\"").Bind(value);
    if (!selector.submitted_by.empty()) s.Bind(selector.submitted_by);
    s.Bind(limit > 0 ? limit : -1);
  };
  return Query(db_, sql, bind, ReadJob);
}

Result<std::vector<JobRecord>> Store::ListActiveJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  return Query(
      db_,
      std::string("SELECT ") + kJobColumns +
          " FROM jobs WHERE state NOT IN (?,?,?) ORDER BY seq ASC",
      [](Stmt& s) {
        s.Bind(static_cast<int>(JobState::kSucceeded))
            .Bind(static_cast<int>(JobState::kFailed))
            .Bind(static_cast<int>(JobState::kCancelled));
      },
      ReadJob);
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

  ADCTL_RETURN_IF_ERROR(
      Execute(db_,
              "UPDATE jobs SET state=?, message=?, attempt=?, devices=?, restarts=?, gpus=?, "
              "spec_yaml=?, started_at=?, finished_at=?, preempted_by=? WHERE id=?",
              static_cast<int>(to), j.message, j.attempt, JoinDevices(j.devices), j.restarts,
              j.gpus, j.spec_yaml, j.started_at, j.finished_at, j.preempted_by, id));

  if (!c.end_attempt_reason.empty() && job->attempt > 0) {
    ADCTL_RETURN_IF_ERROR(Execute(db_,
                                  "UPDATE attempts SET ended_at=?, end_reason=? WHERE job_id=? "
                                  "AND attempt=? AND ended_at=0",
                                  now, c.end_attempt_reason, id, job->attempt));
  }
  if (c.attempt && *c.attempt != job->attempt) {
    ADCTL_RETURN_IF_ERROR(Execute(db_,
                                  "INSERT INTO attempts (job_id, attempt, world_size, devices, "
                                  "started_at, token_sha256) VALUES (?,?,?,?,?,?)",
                                  id, *c.attempt, j.gpus, JoinDevices(j.devices), now,
                                  c.attempt_token_sha256));
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
  ADCTL_RETURN_IF_ERROR(
      Execute(db_, "UPDATE jobs SET priority=?, spec_yaml=? WHERE id=?", priority, spec_yaml, id));
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
  return Query(db_, "SELECT state, COUNT(*) AS count FROM jobs GROUP BY state", NoBinds,
               [](const Stmt& s) {
                 return std::make_pair(static_cast<JobState>(s.Int("state")), s.Int("count"));
               });
}

Result<AttemptRecord> Store::GetAttempt(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto row = QueryRow(
      db_,
      "SELECT world_size, devices, started_at, ended_at, end_reason, token_sha256, cluster_job "
      "FROM attempts WHERE job_id=? AND attempt=?",
      [&](Stmt& s) { s.Bind(job_id).Bind(attempt); },
      [&](const Stmt& s) {
        AttemptRecord a;
        a.job_id = job_id;
        a.attempt = attempt;
        a.world_size = static_cast<int>(s.Int("world_size"));
        a.devices = SplitDevices(s.Text("devices"));
        a.started_at = s.Double("started_at");
        a.ended_at = s.Double("ended_at");
        a.end_reason = s.Text("end_reason");
        a.token_sha256 = s.Text("token_sha256");
        a.cluster_job = s.Text("cluster_job");
        return a;
      });
  if (!row.ok()) return row.status();
  if (!row->has_value()) {
    return NotFound("job " + job_id + ": attempt " + std::to_string(attempt) + " not found");
  }
  return std::move(**row);
}

Status Store::SetAttemptClusterJob(const std::string& job_id, int attempt,
                                   const std::string& cluster_job) {
  std::lock_guard<std::mutex> lock(mu_);
  return Execute(db_, "UPDATE attempts SET cluster_job=? WHERE job_id=? AND attempt=?", cluster_job,
                 job_id, attempt);
}

}  // namespace adctl
