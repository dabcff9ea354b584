// AttemptMonitor, the core: its thread and tick, job operations' access to an attempt, the
// device and rank queries, and watching attempts (rank exits, teardown, the hang watchdog). The
// other parts: attempt_launch.cc, restart_policy.cc, attempt_schedule.cc, reconcile.cc.
#include "server/supervisor/attempt_monitor.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <utility>

#include "common/job_layout.h"

namespace adctl {

namespace {

bool HasProcesses(const ActiveAttempt& a) {
  return std::any_of(a.ranks.begin(), a.ranks.end(), [](const RankProc& r) { return !r.exited; });
}

// How long a rank that ended may leave processes in its group (e.g. an unreaped zombie) before
// it counts as gone anyway.
constexpr double kGroupDrainSeconds = 5;

}  // namespace

ActiveAttempt ActiveAttempt::Of(const JobRecord& job, int attempt, Launcher* launcher,
                                std::vector<std::string> devices, double now) {
  ActiveAttempt a;
  a.job_id = job.id;
  a.attempt = attempt;
  a.launcher = launcher;
  a.devices = std::move(devices);
  a.grace_seconds = job.grace_seconds;
  a.launched_at = now;
  a.hang_timeout_seconds = job.hang_timeout_seconds;
  a.rendezvous_timeout_seconds = job.rendezvous_timeout_seconds;
  return a;
}

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

AttemptMonitor::AttemptMonitor(const SupervisorOptions& options, Store* store, Launchers launchers,
                               JobRecorder* recorder, ChangeFeed* changes, Clock* clock)
    : options_(options),
      store_(store),
      launchers_(std::move(launchers)),
      recorder_(recorder),
      changes_(changes),
      clock_(clock),
      device_unit_(DeviceUnit(options.devices)) {}

AttemptMonitor::~AttemptMonitor() { StopThread(); }

RankHandle AttemptMonitor::Handle(const RankProc& rank) {
  RankHandle h;
  h.pgid = rank.pgid;
  h.start_time = rank.start_time;
  h.cluster_job = rank.cluster_job;
  h.exit_path = rank.exit_path;
  return h;
}

ClusterJobInfo AttemptMonitor::ClusterJob(LauncherKind launcher, const std::string& cluster_job) {
  Launcher* l = launchers_.Find(launcher);
  if (l == nullptr || cluster_job.empty()) return {};
  return l->Describe(cluster_job);  // the launcher has its own lock; mu_ is not needed
}

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
    if (!r.exit_known) a->launcher->Signal(Handle(r), grace_seconds <= 0 ? SIGKILL : SIGTERM);
  }
  if (grace_seconds <= 0) a->killed = true;
}

void AttemptMonitor::ObserveRankLocked(Attempt* a, size_t index, double now) {
  RankProc& r = a->ranks[index];
  if (r.exited) return;
  if (r.exit_known) {
    // Whatever the rank left in its group got SIGKILL; the rank counts as gone once the
    // group is empty (bounded: an unreaped zombie must not hold the job forever).
    if (!a->launcher->HasLeftovers(Handle(r)) || now - r.group_killed_at > kGroupDrainSeconds) {
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
    gone = !a->launcher->Alive(Handle(r));
  }
  if (!gone) return;

  // The rank's own record first; else the launcher's; else it ended while nobody watched,
  // without a word: count it as killed.
  auto recorded = a->launcher->ReadExit(r.exit_path);
  const ExitStatus st = recorded.ok() ? recorded.value() : seen.value_or(ExitStatus{0, SIGKILL});
  r.exit_known = true;
  r.exit = st;
  a->launcher->KillLeftovers(Handle(r));  // anything the rank left behind in its group
  r.group_killed_at = now;
  r.exited = !a->launcher->HasLeftovers(Handle(r));
  store_->RecordRankExit(a->job_id, a->attempt, r.rank, st.exit_code, st.signal);

  ExitClass cls = ClassifyExit(st);
  std::string message = "rank " + std::to_string(r.rank) + " " + DescribeExit(st);
  if (cls == ExitClass::kFatal || cls == ExitClass::kRetryable) {
    // The rank's own reason (its last error event, delivered before it exited) says why: the
    // job's message, `describe`, the page and `wait -o json` carry it.
    auto why = store_->LastRankError(a->job_id, a->attempt, r.rank);
    if (why.ok() && !why->empty()) message += ": " + *why;
  }
  const ClusterJobInfo info =
      r.cluster_job.empty() ? ClusterJobInfo{} : a->launcher->Describe(r.cluster_job);
  if (!r.cluster_job.empty() && (!recorded.ok() || info.ended_by_cluster())) {
    // The rank's batch job ended under it (no exit file, or Slurm ended it: TIMEOUT,
    // NODE_FAIL, PREEMPTED): say how. Slurm's end is retryable, whatever the rank exited with.
    message += " (" + a->launcher->ClusterJobNoun() + " " + r.cluster_job +
               (info.state.empty() ? std::string(": state unknown") : " ended " + info.state) +
               (info.reason.empty() || info.reason == "None" ? "" : ", " + info.reason) + ")";
    if (info.ended_by_cluster() && cls == ExitClass::kFatal) cls = ExitClass::kRetryable;
  }
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
  if (!a->cluster_job.empty() && a->launcher->Describe(a->cluster_job).state == "PENDING") {
    // Queued in the cluster: the rendezvous and hang clocks start when the batch job does.
    a->launched_at = now;
  }
  WatchForHangLocked(a, now);
  if (a->teardown && !a->killed && now >= a->kill_deadline) {
    bool any_alive = false;
    for (RankProc& r : a->ranks) {
      if (!r.exit_known) {
        any_alive = true;
        a->launcher->Signal(Handle(r), SIGKILL);
      }
    }
    a->killed = true;
    if (any_alive) {
      recorder_->AddEvent(a->job_id, a->attempt, "teardown", "warning",
                          "grace period over: SIGKILL sent to the remaining ranks");
    }
  }
}

void AttemptMonitor::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (changes_->closed()) return;
  for (Launcher* launcher : launchers_.All()) {
    if (!launcher->ReapsItsRanks()) continue;
    for (const EndedRank& ended : launcher->Reap()) reaped_[ended.pgid] = ended.exit;
  }
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

}  // namespace adctl
