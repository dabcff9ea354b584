#include "server/supervisor/attempt_monitor.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/job_layout.h"
#include "server/scheduler/scheduler.h"
#include "server/supervisor/launch_plan.h"
#include "server/supervisor/secrets.h"

extern char** environ;

namespace adctl {

namespace {

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Internal("cannot write " + tmp);
    out << text;
    if (!out.flush()) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Internal("cannot rename " + tmp + ": " + ec.message());
  return Status::Ok();
}

bool HasProcesses(const ActiveAttempt& a) {
  return std::any_of(a.ranks.begin(), a.ranks.end(), [](const RankProc& r) { return !r.exited; });
}

// How long a rank that ended may leave processes in its group (e.g. an unreaped zombie) before
// it counts as gone anyway.
constexpr double kGroupDrainSeconds = 5;

}  // namespace

// ---------------------------------------------------------------------------------------------
// AttemptControl.

bool AttemptControl::has_processes() const { return attempt_ && HasProcesses(*attempt_); }

void AttemptControl::Forget() {
  if (!attempt_) return;
  monitor_->active_.erase(job_id_);
  attempt_ = nullptr;
}

void AttemptControl::Stop(double grace_seconds) {
  if (attempt_) monitor_->StartTeardownLocked(attempt_, grace_seconds, monitor_->clock_->Now());
}

// ---------------------------------------------------------------------------------------------
// AttemptMonitor.

AttemptMonitor::AttemptMonitor(const SupervisorOptions& options, Store* store, Launcher* launcher,
                               JobRecorder* recorder, ChangeFeed* changes, Clock* clock)
    : options_(options),
      store_(store),
      launcher_(launcher),
      recorder_(recorder),
      changes_(changes),
      clock_(clock),
      device_unit_(DeviceUnit(options.devices)) {}

AttemptMonitor::~AttemptMonitor() { StopThread(); }

void AttemptMonitor::StartThread() {
  thread_ = std::thread([this] {
    while (!changes_->SleepUnlessClosed(options_.tick_ms)) Tick();
  });
}

void AttemptMonitor::StopThread() {
  if (thread_.joinable()) thread_.join();
}

Result<JobRecord> AttemptMonitor::WithAttempt(
    const std::string& job_id, const std::function<Result<JobRecord>(AttemptControl&)>& operation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  AttemptControl control(this, job_id, it == active_.end() ? nullptr : &it->second);
  return operation(control);
}

std::string AttemptMonitor::WaitReason(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = wait_reasons_.find(job_id);
  return it == wait_reasons_.end() ? "" : it->second;
}

std::vector<DeviceStatus> AttemptMonitor::Devices() {
  std::vector<Device> devices = options_.devices;
  RefreshNvml(&devices);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeviceStatus> out;
  for (const Device& d : devices) {
    DeviceStatus s;
    s.device = d;
    for (const auto& [id, a] : active_) {
      auto it = std::find(a.devices.begin(), a.devices.end(), d.name);
      if (it == a.devices.end()) continue;
      s.job_id = id;
      s.rank = static_cast<int>(it - a.devices.begin());
    }
    out.push_back(s);
  }
  return out;
}

std::map<int, bool> AttemptMonitor::RanksAlive(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<int, bool> alive;
  auto it = active_.find(job_id);
  if (it == active_.end() || it->second.attempt != attempt) return alive;
  for (const RankProc& p : it->second.ranks) alive[p.rank] = !p.exited;
  return alive;
}

// ---------------------------------------------------------------------------------------------
// Launching.

Status AttemptMonitor::LaunchLocked(const JobRecord& job, const std::vector<std::string>& devices,
                                    bool is_restart) {
  const int attempt = job.attempt + 1;
  const double now = clock_->Now();
  // The store's spec is the one copy; the rank reads this file, written from it.
  ADCTL_RETURN_IF_ERROR(WriteFileAtomically(JobLayout(job.job_dir).spec(), job.spec_yaml));
  // A fresh token per attempt: it stops working when the attempt ends, and adctld keeps only
  // its hash (a restarted adctld re-attaches the ranks by it).
  const std::string token = RandomHex(16);
  TransitionChanges c;
  c.attempt = attempt;
  c.attempt_token_sha256 = Sha256Hex(token);
  c.devices = devices;
  if (job.started_at == 0) c.started_at = now;
  if (is_restart) c.restarts = job.restarts + 1;
  std::string joined;
  for (const auto& d : devices) joined += (joined.empty() ? "" : ",") + d;
  const std::string message = (is_restart ? "restart " + std::to_string(job.restarts + 1) + "/" +
                                                std::to_string(job.max_restarts) + ": "
                                          : std::string()) +
                              "attempt " + std::to_string(attempt) + ": " +
                              std::to_string(devices.size()) + " rank(s) on " + joined;
  auto started = recorder_->Transition(job.id, JobState::kStarting, message, c);
  if (!started.ok()) return started.status();
  if (is_restart && recorder_->observer()) recorder_->observer()->OnRestart(job.id);

  Attempt a;
  a.job_id = job.id;
  a.attempt = attempt;
  a.devices = devices;
  a.grace_seconds = job.grace_seconds;
  a.launched_at = now;
  a.hang_timeout_seconds = job.hang_timeout_seconds;
  a.rendezvous_timeout_seconds = job.rendezvous_timeout_seconds;

  AttemptLaunchInput input;
  input.worker_binary = options_.worker_binary;
  input.coordinator = options_.coordinator_address;
  input.job_id = job.id;
  input.job_dir = job.job_dir;
  input.token = token;
  input.attempt = attempt;
  input.devices = devices;
  input.host_slots = options_.devices.size();
  input.tls_ca = options_.tls_ca;
  std::vector<std::string> inherited;
  for (char** e = environ; *e; ++e) inherited.emplace_back(*e);
  const std::vector<RankLaunch> plan =
      PlanAttemptLaunch(input, WorkerBaseEnvironment(inherited, input));
  for (int rank = 0; rank < static_cast<int>(plan.size()); ++rank) {
    const RankLaunch& l = plan[rank];
    auto launched = launcher_->Launch(l);
    if (!launched.ok()) {
      for (RankProc& r : a.ranks) launcher_->Signal(r.pgid, SIGKILL);
      TransitionChanges end;
      end.devices = std::vector<std::string>{};
      end.end_attempt_reason = "launch failed";
      recorder_->Transition(
          job.id, JobState::kFailed,
          "cannot start rank " + std::to_string(rank) + ": " + launched.status().message(), end);
      return launched.status();
    }
    RankProc p;
    p.rank = rank;
    p.pgid = launched->pgid;
    p.start_time = launched->start_time;
    p.is_child = true;
    p.exit_path = l.exit_path;
    a.ranks.push_back(p);
    RankRecord rec;
    rec.job_id = job.id;
    rec.attempt = attempt;
    rec.rank = rank;
    rec.pgid = p.pgid;
    rec.pgid_start_time = p.start_time;
    rec.device = devices[rank];
    Status st = store_->UpsertRank(rec);
    if (!st.ok()) spdlog::error("job {}: cannot record rank {}: {}", job.id, rank, st.ToString());
  }
  active_[job.id] = std::move(a);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Watching attempts.

void AttemptMonitor::StartTeardownLocked(Attempt* a, double grace_seconds, double now) {
  const double deadline = now + std::max(0.0, grace_seconds);
  if (a->teardown) {
    a->kill_deadline = std::min(a->kill_deadline, deadline);
    return;
  }
  a->teardown = true;
  a->kill_deadline = deadline;
  for (RankProc& r : a->ranks) {
    if (!r.exit_known) launcher_->Signal(r.pgid, grace_seconds <= 0 ? SIGKILL : SIGTERM);
  }
  if (grace_seconds <= 0) a->killed = true;
}

void AttemptMonitor::ObserveRankLocked(Attempt* a, size_t index, double now) {
  RankProc& r = a->ranks[index];
  if (r.exited) return;
  if (r.exit_known) {
    // Whatever the rank left in its group got SIGKILL; the rank counts as gone once the
    // group is empty (bounded: an unreaped zombie must not hold the job forever).
    if (!launcher_->GroupExists(r.pgid) || now - r.group_killed_at > kGroupDrainSeconds) {
      r.exited = true;
    }
    return;
  }
  std::optional<ExitStatus> seen;  // how the launcher saw it end, when it knows
  bool gone = false;
  if (r.is_child) {
    auto it = reaped_.find(r.pgid);
    if (it != reaped_.end()) {
      gone = true;
      seen = it->second;
      reaped_.erase(it);
    }
  } else {
    gone = !launcher_->Alive(r.pgid, r.start_time);
  }
  if (!gone) return;

  // The rank's own record first; else the launcher's; else it ended while nobody watched,
  // without a word: count it as killed.
  auto recorded = launcher_->ReadExit(r.exit_path);
  const ExitStatus st = recorded.ok() ? recorded.value() : seen.value_or(ExitStatus{0, SIGKILL});
  r.exit_known = true;
  r.exit = st;
  launcher_->Signal(r.pgid, SIGKILL);  // anything the rank left behind in its group
  r.group_killed_at = now;
  r.exited = !launcher_->GroupExists(r.pgid);
  store_->RecordRankExit(a->job_id, a->attempt, r.rank, st.exit_code, st.signal);

  const ExitClass cls = ClassifyExit(st);
  const std::string message = "rank " + std::to_string(r.rank) + " " + DescribeExit(st);
  recorder_->AddEvent(a->job_id, a->attempt, "rank_exit",
                      (cls == ExitClass::kSuccess || cls == ExitClass::kStopped) ? "info" : "error",
                      message);
  spdlog::info("job {} attempt {}: {}", a->job_id, a->attempt, message);

  const bool failed = cls == ExitClass::kRetryable || cls == ExitClass::kFatal ||
                      (cls == ExitClass::kStopped && !a->teardown);
  if (failed && a->failure.empty() && !(a->teardown && a->killed)) {
    a->failure = message;
    a->failure_class = cls == ExitClass::kFatal ? ExitClass::kFatal : ExitClass::kRetryable;
  }
  if (failed && !a->teardown) {
    // One rank down takes the attempt down: the others would hang in their collectives.
    StartTeardownLocked(a, a->grace_seconds, now);
  }
}

void AttemptMonitor::WatchForHangLocked(Attempt* a, double now) {
  if (a->teardown || a->ranks.empty()) return;
  if (now - a->launched_at > a->rendezvous_timeout_seconds && !a->all_registered) {
    // A rank that never registers (stuck before it reaches adctld) would keep the attempt
    // STARTING for ever: it fails, retryable, after the spec's rendezvous timeout.
    auto ranks = store_->ListRanks(a->job_id, a->attempt);
    if (ranks.ok()) {
      std::string missing;
      for (const RankRecord& r : ranks.value()) {
        if (r.worker_pid == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r.rank);
      }
      if (missing.empty()) {
        a->all_registered = true;
      } else {
        a->failure = "rank(s) " + missing + " did not register within " +
                     std::to_string(static_cast<int>(a->rendezvous_timeout_seconds)) +
                     " s (resources.rendezvous_timeout_seconds)";
        a->failure_class = ExitClass::kRetryable;
        recorder_->AddEvent(a->job_id, a->attempt, "rendezvous", "error",
                            a->failure + "; stopping the attempt");
        StartTeardownLocked(a, a->grace_seconds, now);
        return;
      }
    }
  }
  if (a->hang_timeout_seconds <= 0) return;
  auto job = store_->GetJob(a->job_id);
  if (!job.ok() || job->state != JobState::kRunning) return;
  const double last_progress = std::max(job->progress.updated_at, a->launched_at);
  if (now - last_progress <= a->hang_timeout_seconds) return;
  a->failure = "no training progress for " + std::to_string(static_cast<int>(now - last_progress)) +
               " s (resources.hang_timeout_seconds " +
               std::to_string(static_cast<int>(a->hang_timeout_seconds)) + ")";
  a->failure_class = ExitClass::kRetryable;
  recorder_->AddEvent(a->job_id, a->attempt, "hang", "error",
                      a->failure + "; stopping the attempt");
  StartTeardownLocked(a, a->grace_seconds, now);
}

void AttemptMonitor::UpdateAttemptLocked(Attempt* a, double now) {
  for (size_t i = 0; i < a->ranks.size(); ++i) ObserveRankLocked(a, i, now);
  WatchForHangLocked(a, now);
  if (a->teardown && !a->killed && now >= a->kill_deadline) {
    bool any_alive = false;
    for (RankProc& r : a->ranks) {
      if (!r.exit_known) {
        any_alive = true;
        launcher_->Signal(r.pgid, SIGKILL);
      }
    }
    a->killed = true;
    if (any_alive) {
      recorder_->AddEvent(a->job_id, a->attempt, "teardown", "warning",
                          "grace period over: SIGKILL sent to the remaining ranks");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Restart policy.

bool AttemptMonitor::FinishAttemptLocked(Attempt* a, double now) {
  auto job = store_->GetJob(a->job_id);
  if (!job.ok()) return false;
  const bool all_ok =
      !a->ranks.empty() && std::all_of(a->ranks.begin(), a->ranks.end(), [](const RankProc& r) {
        return ClassifyExit(r.exit) == ExitClass::kSuccess;
      });
  std::string summary = all_ok ? "all ranks finished" : a->failure;
  if (summary.empty()) {
    std::set<std::string> exits;
    for (const RankProc& r : a->ranks) exits.insert(DescribeExit(r.exit));
    for (const auto& e : exits) summary += (summary.empty() ? "ranks " : "; ") + e;
  }
  TransitionChanges end;
  end.end_attempt_reason = summary.empty() ? "ended" : summary;
  end.devices = std::vector<std::string>{};
  const JobState state = job->state;

  if (all_ok && state != JobState::kRestarting) {
    recorder_->Transition(a->job_id, JobState::kSucceeded,
                          "finished: all " + std::to_string(a->ranks.size()) + " rank(s) exited 0",
                          end);
    return false;
  }
  switch (state) {
    case JobState::kCancelling:
      recorder_->Transition(a->job_id, JobState::kCancelled, "cancelled by user", end);
      return false;
    case JobState::kPausing: {
      std::string msg = "paused; resumes from checkpoint step " +
                        std::to_string(job->progress.last_checkpoint_step);
      if (!a->failure.empty()) msg += " (" + a->failure + ")";
      recorder_->Transition(a->job_id, JobState::kPaused, msg, end);
      return false;
    }
    case JobState::kStarting:
    case JobState::kRunning: {
      if (a->failure.empty()) a->failure = summary, a->failure_class = ExitClass::kRetryable;
      if (a->failure_class == ExitClass::kFatal) {
        recorder_->Transition(a->job_id, JobState::kFailed,
                              a->failure + "; not retried. See " +
                                  JobLayout(job->job_dir).attempt_logs(a->attempt) + "/",
                              end);
        return false;
      }
      if (job->restarts >= job->max_restarts) {
        recorder_->Transition(a->job_id, JobState::kFailed,
                              a->failure + "; restarts exhausted (" +
                                  std::to_string(job->restarts) + "/" +
                                  std::to_string(job->max_restarts) + ")",
                              end);
        return false;
      }
      TransitionChanges keep;  // RESTARTING keeps its devices for the next attempt
      keep.end_attempt_reason = end.end_attempt_reason;
      auto r = recorder_->Transition(a->job_id, JobState::kRestarting,
                                     a->failure + "; restarting from the newest checkpoint (" +
                                         std::to_string(job->restarts + 1) + "/" +
                                         std::to_string(job->max_restarts) + ")",
                                     keep);
      if (!r.ok()) return false;
      a->ranks.clear();
      a->teardown = false;
      a->killed = false;
      a->failure.clear();
      a->relaunch_at = now + options_.restart_backoff_seconds;
      return true;
    }
    case JobState::kRestarting:
      a->ranks.clear();
      if (a->relaunch_at == 0) a->relaunch_at = now;
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------------------------
// The tick.

void AttemptMonitor::ScheduleLocked() {
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) {
    spdlog::error("scheduler: {}", jobs.status().ToString());
    return;
  }
  std::vector<std::string> names;
  for (const Device& d : options_.devices) names.push_back(d.name);
  std::map<std::string, std::string> busy;
  for (const auto& [id, a] : active_) {
    for (const auto& d : a.devices) busy[d] = id;
  }
  std::vector<QueuedJob> queued;
  std::map<std::string, JobRecord> by_id;
  for (const JobRecord& j : jobs.value()) {
    if (j.state != JobState::kQueued) continue;
    queued.push_back({j.id, j.gpus, j.priority, j.seq});
    by_id[j.id] = j;
  }
  ScheduleDecision d = Schedule(names, busy, queued, device_unit_);
  wait_reasons_ = d.wait_reasons;
  for (const Placement& p : d.placements) {
    Status st = LaunchLocked(by_id[p.job_id], p.devices, /*is_restart=*/false);
    if (!st.ok()) spdlog::error("job {}: launch failed: {}", p.job_id, st.ToString());
  }
}

void AttemptMonitor::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (changes_->closed()) return;
  for (const EndedRank& ended : launcher_->Reap()) reaped_[ended.pgid] = ended.exit;
  const double now = clock_->Now();
  std::vector<std::string> relaunch;
  for (auto it = active_.begin(); it != active_.end();) {
    Attempt& a = it->second;
    UpdateAttemptLocked(&a, now);
    const bool all_exited = !HasProcesses(a);
    if (all_exited && a.relaunch_at == 0) {
      if (!FinishAttemptLocked(&a, now)) {
        it = active_.erase(it);
        continue;
      }
    }
    if (a.ranks.empty() && a.relaunch_at > 0 && now >= a.relaunch_at) relaunch.push_back(it->first);
    ++it;
  }
  for (const std::string& id : relaunch) {
    std::vector<std::string> devices = active_[id].devices;
    active_.erase(id);
    auto job = store_->GetJob(id);
    if (!job.ok() || job->state != JobState::kRestarting) continue;
    Status st = LaunchLocked(job.value(), devices, /*is_restart=*/true);
    if (!st.ok()) spdlog::error("job {}: relaunch failed: {}", id, st.ToString());
  }
  // Forget exit statuses of children that belong to no attempt (e.g. a failed launch).
  if (reaped_.size() > 1024) reaped_.clear();
  ScheduleLocked();
}

// ---------------------------------------------------------------------------------------------
// Reconcile.

Status AttemptMonitor::Reconcile() {
  std::lock_guard<std::mutex> lock(mu_);
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) return jobs.status();
  const double now = clock_->Now();
  for (const JobRecord& job : jobs.value()) {
    if (!HasLiveAttempt(job.state)) continue;
    Attempt a;
    a.job_id = job.id;
    a.attempt = job.attempt;
    a.devices = job.devices;
    a.grace_seconds = job.grace_seconds;
    a.launched_at = now;
    a.hang_timeout_seconds = job.hang_timeout_seconds;
    a.rendezvous_timeout_seconds = job.rendezvous_timeout_seconds;
    auto ranks = store_->ListRanks(job.id, job.attempt);
    if (!ranks.ok()) return ranks.status();
    int alive = 0;
    for (const RankRecord& r : ranks.value()) {
      RankProc p;
      p.rank = r.rank;
      p.pgid = r.pgid;
      p.start_time = r.pgid_start_time;
      p.is_child = false;
      p.exit_known = r.exited;
      p.exited = r.exited && !launcher_->GroupExists(r.pgid);
      p.group_killed_at = now;
      p.exit.exit_code = r.exit_code;
      p.exit.signal = r.exit_signal;
      p.exit_path = JobLayout(job.job_dir).rank_exit(job.attempt, r.rank);
      if (!p.exited && launcher_->Alive(p.pgid, p.start_time)) ++alive;
      a.ranks.push_back(p);
    }
    const int expected = job.gpus;
    if (job.state == JobState::kRestarting && alive == 0) {
      a.ranks.clear();
      a.relaunch_at = now;
    } else if (static_cast<int>(ranks->size()) < expected && job.state != JobState::kRestarting) {
      // adctld died while launching: ranks it never recorded cannot be supervised.
      a.failure =
          "attempt " + std::to_string(job.attempt) + " was interrupted by an adctld restart";
      a.failure_class = ExitClass::kRetryable;
      StartTeardownLocked(&a, 0, now);
    }
    if (job.state == JobState::kCancelling || job.state == JobState::kPausing) {
      StartTeardownLocked(&a, job.grace_seconds, now);
    }
    const std::string message = "adctld restarted: " + std::to_string(alive) + " of " +
                                std::to_string(expected) + " rank(s) of attempt " +
                                std::to_string(job.attempt) + " still alive, re-attached";
    recorder_->AddEvent(job.id, job.attempt, "reconcile", "info", message);
    spdlog::info("job {}: {}", job.id, message);
    active_[job.id] = std::move(a);
  }
  return Status::Ok();
}

}  // namespace adctl
