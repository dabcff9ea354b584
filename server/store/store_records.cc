// Store: what an attempt's ranks and their launcher report, and what is kept beside it: the
// ranks rows, events, metric points (with the job's progress), checkpoints and their pins,
// validation samples and the rendezvous KV. Jobs and their transitions are in store.cc.
#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <type_traits>

#include "server/store/statement.h"
#include "server/store/store.h"

namespace adctl {

namespace {

using store_internal::Execute;
using store_internal::Query;
using store_internal::QueryRow;
using store_internal::Stmt;
using store_internal::Txn;

// A record list's name (common/record_values.h) as its table's column: the same, but for the
// samples' "index" (an SQL keyword), kept in column idx.
std::string Column(const char* name) {
  return std::string_view(name) == "index" ? "idx" : std::string(name);
}

// ", step, path, ..." and ", ?, ?, ..." for the columns of a record list.
template <typename Values, typename ForEach>
std::pair<std::string, std::string> ListColumns(ForEach&& for_each) {
  Values values;
  std::string columns, params;
  for_each(values, [&](const char* name, auto&) {
    columns += ", " + Column(name);
    params += ",?";
  });
  return {columns, params};
}

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

// The metric columns Store reads: who sent the point, then ForEachMetricValue's names.
std::string MetricSelect() {
  return "SELECT id, attempt, rank, eval_by_timestep" +
         ListColumns<MetricValues>(kMetricValues).first;
}

MetricRecord ReadMetric(const Stmt& s, const std::string& job_id) {
  MetricRecord m;
  m.id = s.Int("id");
  m.job_id = job_id;
  m.attempt = static_cast<int>(s.Int("attempt"));
  m.rank = static_cast<int>(s.Int("rank"));
  m.eval_by_timestep = EvalByTimestepFromJson(s.Text("eval_by_timestep"));
  ForEachMetricValue(m, [&](const char* name, auto& v) { s.Read(name, &v); });
  return m;
}

}  // namespace

// ---- Ranks -----------------------------------------------------------------------------------

Status Store::UpsertRank(const RankRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  return Execute(db_,
                 "INSERT OR REPLACE INTO ranks (job_id, attempt, rank, pgid, pgid_start_time, "
                 "worker_pid, host, device, exited, exit_code, exit_signal, last_heartbeat) "
                 "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                 r.job_id, r.attempt, r.rank, r.pgid, static_cast<int64_t>(r.pgid_start_time),
                 r.worker_pid, r.host, r.device, r.exited ? 1 : 0, r.exit_code, r.exit_signal,
                 r.last_heartbeat);
}

Status Store::RecordRankWorker(const std::string& job_id, int attempt, int rank, int worker_pid,
                               const std::string& host, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  return Execute(db_,
                 "UPDATE ranks SET worker_pid=?, host=?, last_heartbeat=? "
                 "WHERE job_id=? AND attempt=? AND rank=?",
                 worker_pid, host, now, job_id, attempt, rank);
}

Status Store::RecordHeartbeat(const std::string& job_id, int attempt, int rank, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  return Execute(db_, "UPDATE ranks SET last_heartbeat=? WHERE job_id=? AND attempt=? AND rank=?",
                 now, job_id, attempt, rank);
}

Status Store::RecordRankExit(const std::string& job_id, int attempt, int rank, int exit_code,
                             int exit_signal) {
  std::lock_guard<std::mutex> lock(mu_);
  return Execute(db_,
                 "UPDATE ranks SET exited=1, exit_code=?, exit_signal=? "
                 "WHERE job_id=? AND attempt=? AND rank=?",
                 exit_code, exit_signal, job_id, attempt, rank);
}

Result<std::vector<RankRecord>> Store::ListRanks(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  return Query(
      db_,
      "SELECT rank, pgid, pgid_start_time, worker_pid, host, device, exited, exit_code, "
      "exit_signal, last_heartbeat FROM ranks WHERE job_id=? AND attempt=? ORDER BY rank",
      [&](Stmt& s) { s.Bind(job_id).Bind(attempt); },
      [&](const Stmt& s) {
        RankRecord r;
        r.job_id = job_id;
        r.attempt = attempt;
        r.rank = static_cast<int>(s.Int("rank"));
        r.pgid = static_cast<int>(s.Int("pgid"));
        r.pgid_start_time = static_cast<uint64_t>(s.Int("pgid_start_time"));
        r.worker_pid = static_cast<int>(s.Int("worker_pid"));
        r.host = s.Text("host");
        r.device = s.Text("device");
        r.exited = s.Int("exited") != 0;
        r.exit_code = static_cast<int>(s.Int("exit_code"));
        r.exit_signal = static_cast<int>(s.Int("exit_signal"));
        r.last_heartbeat = s.Double("last_heartbeat");
        return r;
      });
}

// ---- Events ----------------------------------------------------------------------------------

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
  return Query(
      db_,
      "SELECT id, attempt, time, kind, from_state, to_state, level, message FROM events "
      "WHERE job_id=? AND id>? ORDER BY id LIMIT ?",
      [&](Stmt& s) { s.Bind(job_id).Bind(after_id).Bind(limit > 0 ? limit : -1); },
      [&](const Stmt& s) {
        EventRecord e;
        e.id = s.Int("id");
        e.job_id = job_id;
        e.attempt = static_cast<int>(s.Int("attempt"));
        e.time = s.Double("time");
        e.kind = s.Text("kind");
        if (!s.IsNull("from_state")) e.from_state = static_cast<JobState>(s.Int("from_state"));
        if (!s.IsNull("to_state")) e.to_state = static_cast<JobState>(s.Int("to_state"));
        e.level = s.Text("level");
        e.message = s.Text("message");
        return e;
      });
}

Result<std::string> Store::LastRankError(const std::string& job_id, int attempt, int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  auto message = QueryRow(
      db_,
      "SELECT message FROM events WHERE job_id=? AND attempt=? AND kind='worker' AND "
      "level='error' AND substr(message, 1, ?)=? ORDER BY id DESC LIMIT 1",
      [&](Stmt& s) {
        s.Bind(job_id)
            .Bind(static_cast<int64_t>(attempt))
            .Bind(static_cast<int64_t>(prefix.size()))
            .Bind(prefix);
      },
      [](const Stmt& s) { return s.Text("message"); });
  if (!message.ok()) return message.status();
  if (!message->has_value()) return std::string();
  return (*message)->substr(prefix.size());
}

// ---- Metrics ---------------------------------------------------------------------------------

Status Store::AddMetrics(const std::vector<MetricRecord>& points) {
  if (points.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  // A re-sent batch (client retry after a lost reply) must not duplicate rows.
  static const std::string insert = [] {
    const auto [columns, params] = ListColumns<MetricValues>(kMetricValues);
    return "INSERT OR IGNORE INTO metrics (job_id, attempt, rank, eval_by_timestep" + columns +
           ") VALUES (?,?,?,?" + params + ")";
  }();
  // Rank 0's point is the job's progress (ForEachProgressMetric's columns and its time).
  static const std::string progress = [] {
    std::string sql = "UPDATE jobs SET ";
    JobProgress p;
    ForEachProgressMetric(
        p, [&](const char* column, const auto&) { sql += std::string(column) + "=?, "; });
    return sql + "progress_updated_at=? WHERE id=?";
  }();
  // One prepared statement each for the batch's rows.
  Stmt s(db_, insert);
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  Stmt u(db_, progress);
  ADCTL_RETURN_IF_ERROR(u.prepare_status());
  for (const MetricRecord& m : points) {
    s.Reset();
    s.Bind(m.job_id).Bind(m.attempt).Bind(m.rank).Bind(EvalByTimestepJson(m.eval_by_timestep));
    ForEachMetricValue(m, [&](const char*, const auto& v) { s.Bind(v); });
    ADCTL_RETURN_IF_ERROR(s.Run());
    if (m.rank != 0) continue;
    const JobProgress p = ProgressOf(m);
    u.Reset();
    ForEachProgressMetric(p, [&](const char*, const auto& v) { u.Bind(v); });
    u.Bind(p.updated_at).Bind(m.job_id);
    ADCTL_RETURN_IF_ERROR(u.Run());
    // An eval loss only when the point carries one.
    if (m.eval_loss >= 0) {
      ADCTL_RETURN_IF_ERROR(Execute(db_, "UPDATE jobs SET eval_loss=?, eval_step=? WHERE id=?",
                                    m.eval_loss, m.step, m.job_id));
    }
  }
  return txn.Commit();
}

JobProgress ProgressOf(const MetricValues& m) {
  JobProgress p;
  ForEachProgressMetric(p, [&](const char* name, auto& v) {
    v = static_cast<std::remove_reference_t<decltype(v)>>(MetricValueByName(m, name).value_or(0));
  });
  p.updated_at = m.time;
  return p;
}

Result<int64_t> Store::ThinMetrics(int64_t max_per_rank) {
  if (max_per_rank < 4) return InvalidArgument("metric history limit must be at least 4 points");
  std::lock_guard<std::mutex> lock(mu_);
  // Each series over the limit: (job, rank, points).
  auto over = Query(
      db_,
      "SELECT job_id, rank, COUNT(*) AS points FROM metrics GROUP BY job_id, rank "
      "HAVING COUNT(*) > ?",
      [&](Stmt& s) { s.Bind(max_per_rank); },
      [](const Stmt& s) {
        return std::make_tuple(s.Text("job_id"), static_cast<int>(s.Int("rank")), s.Int("points"));
      });
  if (!over.ok()) return over.status();
  int64_t removed = 0;
  for (const auto& [job_id, rank, points] : *over) {
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

Result<std::vector<MetricRecord>> Store::ListMetrics(const std::string& job_id, int64_t after_id,
                                                     std::optional<int> rank, int limit) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string sql = MetricSelect() + " FROM metrics WHERE job_id=? AND id>?";
  if (rank) sql += " AND rank=?";
  sql += " ORDER BY id LIMIT ?";
  const auto bind = [&](Stmt& s) {
    s.Bind(job_id).Bind(after_id);
    if (rank) s.Bind(*rank);
    s.Bind(limit > 0 ? limit : -1);
  };
  return Query(db_, sql, bind, [&](const Stmt& s) { return ReadMetric(s, job_id); });
}

Result<std::vector<MetricRecord>> Store::LatestMetricsPerRank(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return Query(
      db_,
      MetricSelect() +
          " FROM metrics WHERE id IN (SELECT MAX(id) FROM metrics WHERE "
          "job_id=? GROUP BY rank) ORDER BY rank",
      [&](Stmt& s) { s.Bind(job_id); }, [&](const Stmt& s) { return ReadMetric(s, job_id); });
}

// ---- Checkpoints and their pins --------------------------------------------------------------

Status Store::AddCheckpoint(const CheckpointRecord& c) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  static const auto list = ListColumns<CheckpointValues>(kCheckpointValues);
  Stmt s(db_, "INSERT OR REPLACE INTO checkpoints (job_id, attempt, created_at" + list.first +
                  ") VALUES (?,?,?" + list.second + ")");
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  s.Bind(c.job_id).Bind(c.attempt).Bind(c.created_at > 0 ? c.created_at : clock_->Now());
  ForEachCheckpointValue(c, [&](const char*, const auto& v) { s.Bind(v); });
  ADCTL_RETURN_IF_ERROR(s.Run());
  Stmt p(db_, "UPDATE jobs SET last_checkpoint_step=MAX(last_checkpoint_step, ?) WHERE id=?");
  ADCTL_RETURN_IF_ERROR(p.prepare_status());
  p.Bind(c.step).Bind(c.job_id);
  ADCTL_RETURN_IF_ERROR(p.Run());
  return txn.Commit();
}

Result<std::vector<CheckpointRecord>> Store::ListCheckpoints(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  static const std::string columns = ListColumns<CheckpointValues>(kCheckpointValues).first;
  return Query(
      db_,
      "SELECT attempt, created_at" + columns + " FROM checkpoints WHERE job_id=? ORDER BY step",
      [&](Stmt& s) { s.Bind(job_id); },
      [&](const Stmt& s) {
        CheckpointRecord c;
        c.job_id = job_id;
        c.attempt = static_cast<int>(s.Int("attempt"));
        c.created_at = s.Double("created_at");
        ForEachCheckpointValue(c, [&](const char* name, auto& v) { s.Read(Column(name), &v); });
        return c;
      });
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
  auto steps = Query(
      db_, "SELECT step FROM checkpoint_pins WHERE job_id=? ORDER BY step",
      [&](Stmt& s) { s.Bind(job_id); }, [](const Stmt& s) { return s.Int("step"); });
  if (!steps.ok()) return steps.status();
  return std::set<int64_t>(steps->begin(), steps->end());
}

// ---- Validation samples ----------------------------------------------------------------------

Status Store::AddSamples(const std::vector<SampleRecord>& samples) {
  std::lock_guard<std::mutex> lock(mu_);
  Txn txn(db_);
  ADCTL_RETURN_IF_ERROR(txn.begin_status());
  for (const SampleRecord& r : samples) {
    static const auto list = ListColumns<SampleValues>(kSampleValues);
    Stmt s(db_, "INSERT OR REPLACE INTO samples (job_id, attempt, created_at" + list.first +
                    ") VALUES (?,?,?" + list.second + ")");
    ADCTL_RETURN_IF_ERROR(s.prepare_status());
    s.Bind(r.job_id).Bind(r.attempt).Bind(r.created_at > 0 ? r.created_at : clock_->Now());
    ForEachSampleValue(r, [&](const char*, const auto& v) { s.Bind(v); });
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
    ADCTL_RETURN_IF_ERROR(
        Execute(db_, "UPDATE jobs SET validation_seconds=? WHERE id=?", total, job_id));
  }
  return txn.Commit();
}

Result<std::vector<SampleRecord>> Store::ListSamples(const std::string& job_id, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  static const std::string columns = ListColumns<SampleValues>(kSampleValues).first;
  return Query(
      db_,
      "SELECT attempt, created_at" + columns +
          " FROM samples WHERE job_id=? AND (?=0 OR step=?) ORDER BY step, idx < 0, idx",
      [&](Stmt& s) { s.Bind(job_id).Bind(step).Bind(step); },
      [&](const Stmt& s) {
        SampleRecord r;
        r.job_id = job_id;
        r.attempt = static_cast<int>(s.Int("attempt"));
        r.created_at = s.Double("created_at");
        ForEachSampleValue(r, [&](const char* name, auto& v) { s.Read(Column(name), &v); });
        return r;
      });
}

// ---- Rendezvous KV ---------------------------------------------------------------------------

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
  return QueryRow(
      db_, "SELECT value FROM kv WHERE job_id=? AND attempt=? AND key=?",
      [&](Stmt& s) { s.Bind(job_id).Bind(attempt).Bind(key); },
      [](const Stmt& s) { return s.Text("value"); });
}

}  // namespace adctl
