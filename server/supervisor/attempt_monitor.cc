#include "server/supervisor/attempt_monitor.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/fs_util.h"
#include "common/job_layout.h"
#include "common/job_spec.h"
#include "server/scheduler/scheduler.h"
#include "server/supervisor/launch_plan.h"
#include "server/supervisor/path_policy.h"
#include "server/supervisor/secrets.h"

extern char** environ;

namespace adctl {

namespace {

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
                               JobRecorder* recorder, ChangeFeed* changes, Clock* clock,
                               Launcher* slurm)
    : options_(options),
      store_(store),
      launcher_(launcher),
      slurm_(slurm),
      recorder_(recorder),
      changes_(changes),
      clock_(clock),
      device_unit_(DeviceUnit(options.devices)) {}

AttemptMonitor::~AttemptMonitor() { StopThread(); }

Launcher* AttemptMonitor::LauncherFor(const std::string& name) const {
  if (name == "slurm") return slurm_;
  return launcher_;
}

RankHandle AttemptMonitor::Handle(const RankProc& rank) {
  RankHandle h;
  h.pgid = rank.pgid;
  h.start_time = rank.start_time;
  h.cluster_job = rank.cluster_job;
  h.exit_path = rank.exit_path;
  return h;
}

ClusterJobInfo AttemptMonitor::ClusterJob(const std::string& job_id, const std::string& launcher,
                                          const std::string& cluster_job) {
  (void)job_id;
  Launcher* l = LauncherFor(launcher);
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
// Launching.

Status AttemptMonitor::LaunchLocked(const JobRecord& job, const std::vector<std::string>& devices,
                                    bool is_restart) {
  const int attempt = job.attempt + 1;
  const double now = clock_->Now();
  // A launch that cannot be made fails the job (not retried: it would fail the same way).
  auto fail = [&](const std::string& message) {
    TransitionChanges end;
    end.devices = std::vector<std::string>{};
    if (job.state != JobState::kStarting) {
      recorder_->Transition(job.id, JobState::kStarting, message, {});
    }
    recorder_->Transition(job.id, JobState::kFailed, message, end);
    return FailedPrecondition(message);
  };
  Launcher* const launcher = LauncherFor(job.launcher);
  if (launcher == nullptr) {
    return fail("resources.launcher " + job.launcher +
                ": this adctld has no such launcher (start it with --slurm)");
  }
  // The store's spec is the one copy; the rank reads this file, written from it, without the
  // launcher's fields and the webhooks (ClearCoordinatorFields).
  auto parsed = recorder_->specs().Get(job);
  if (!parsed.ok()) return parsed.status();
  // The paths again, where they are used: a folder swapped for a symlink since the submit (into
  // another job's folder, out of --write-root), or a checkpoint.dir another live job took since.
  Status paths = CheckSpecPaths(*parsed.value(), options_.data_dir, options_.paths);
  if (paths.ok()) paths = CheckCheckpointDirFree(store_, job.checkpoint_dir, job.id);
  if (!paths.ok()) return fail("launch refused: " + paths.message());
  TransitionChanges c;
  std::string shrunk;  // how the launch differs from the spec's rank count
  std::shared_ptr<const JobSpec> spec = parsed.value();
  if (static_cast<int>(devices.size()) != job.gpus && job.launcher == "local") {
    // A preempted job resuming on fewer ranks (resources.allow_shrink): the global batch is kept.
    auto resized = WithRankCount(*spec, static_cast<int64_t>(devices.size()), "resources.gpus");
    if (!resized.ok()) return fail("launch refused: " + resized.status().message());
    c.gpus = static_cast<int>(devices.size());
    c.spec_yaml = JobSpecToYaml(*resized);
    shrunk = " (shrunk from " + std::to_string(job.gpus) + " after preemption by " +
             job.preempted_by + ": train.grad_accum " + std::to_string(resized->train.grad_accum) +
             ", global batch " + std::to_string(resized->GlobalBatch()) + " kept)";
    spec = recorder_->specs().Remember(job.id, *c.spec_yaml, std::move(resized.value()));
  }
  if (!job.preempted_by.empty()) c.preempted_by = std::string();
  const ResourceSpec& resources = spec->resources;
  JobSpec rank_spec = *spec;
  ClearCoordinatorFields(&rank_spec);
  // The ranks get the checkpoint folder as just checked, its symlinks resolved: their saver
  // refuses to write once it resolves elsewhere (a swap after this launch).
  if (!rank_spec.checkpoint.dir.empty()) {
    std::error_code resolve_ec;
    const auto resolved = std::filesystem::weakly_canonical(rank_spec.checkpoint.dir, resolve_ec);
    if (!resolve_ec) rank_spec.checkpoint.dir = resolved.string();
  }
  ADCTL_RETURN_IF_ERROR(
      WriteFileAtomically(JobLayout(job.job_dir).spec(), JobSpecToYaml(rank_spec)));
  // A fresh token per attempt: it stops working when the attempt ends, and adctld keeps only
  // its hash (a restarted adctld re-attaches the ranks by it).
  const std::string token = RandomHex(16);
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
                              std::to_string(devices.size()) + " rank(s) on " + joined + shrunk;
  auto started = recorder_->Transition(job.id, JobState::kStarting, message, c);
  if (!started.ok()) return started.status();
  if (is_restart && recorder_->observer()) recorder_->observer()->OnRestart(job.id);

  Attempt a;
  a.job_id = job.id;
  a.attempt = attempt;
  a.launcher = launcher;
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
  input.cluster = launcher != launcher_;
  input.cluster_gpus = options_.slurm.gpus;
  input.cpus_per_task = options_.slurm.cpus_per_task;
  input.worker_ifname = options_.worker_ifname;
  input.worker_env = options_.worker_env;
  std::vector<std::string> inherited;
  for (char** e = environ; *e; ++e) inherited.emplace_back(*e);
  AttemptLaunch launch;
  launch.job_id = job.id;
  launch.attempt = attempt;
  launch.job_dir = job.job_dir;
  launch.ranks = PlanAttemptLaunch(input, WorkerBaseEnvironment(inherited, input));
  if (input.cluster) {
    launch.cluster_argv = PlanClusterArgv(input);
    launch.cluster.nodes = static_cast<int>(resources.nodes);
    launch.cluster.tasks_per_node = static_cast<int>(resources.gpus / resources.nodes);
    launch.cluster.gpus = options_.slurm.gpus;
    launch.cluster.account = resources.slurm_account;
    launch.cluster.partition = resources.slurm_partition;
    launch.cluster.qos = resources.slurm_qos;
    launch.cluster.time_limit = resources.slurm_time_limit;
    launch.cluster.extra_args = resources.slurm_extra_args;
    launch.cluster.grace_seconds = job.grace_seconds;
  }
  auto launched = launcher->LaunchAttempt(launch);
  if (!launched.ok()) {
    TransitionChanges end;
    end.devices = std::vector<std::string>{};
    end.end_attempt_reason = "launch failed";
    recorder_->Transition(job.id, JobState::kFailed,
                          "cannot start the ranks (" + launcher->name() +
                              " launcher): " + launched.status().message(),
                          end);
    return launched.status();
  }
  a.cluster_job = launched->cluster_job;
  if (!a.cluster_job.empty()) {
    Status st = store_->SetAttemptClusterJob(job.id, attempt, a.cluster_job);
    if (!st.ok()) spdlog::error("job {}: cannot record cluster job: {}", job.id, st.ToString());
    recorder_->AddEvent(job.id, attempt, "launcher", "info",
                        "attempt " + std::to_string(attempt) + " is Slurm job " + a.cluster_job);
  }
  for (int rank = 0; rank < static_cast<int>(launched->ranks.size()); ++rank) {
    const RankHandle& h = launched->ranks[rank];
    RankProc p;
    p.rank = rank;
    p.pgid = h.pgid;
    p.start_time = h.start_time;
    p.cluster_job = h.cluster_job;
    p.is_child = launcher->ReapsItsRanks();
    p.exit_path = h.exit_path;
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
    message += " (Slurm job " + r.cluster_job +
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

// ---------------------------------------------------------------------------------------------
// Restart policy.

bool AttemptMonitor::FinishAttemptLocked(Attempt* a, double now) {
  if (a->launcher != nullptr && !a->cluster_job.empty()) a->launcher->EndAttempt(a->cluster_job);
  auto job = store_->GetJob(a->job_id);
  if (!job.ok()) return false;
  if (attempt_ended_ && job->attempt == a->attempt) {
    attempt_ended_(*job, a->attempt, static_cast<int>(a->ranks.size()));
  }
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
      const std::string step = std::to_string(job->progress.last_checkpoint_step);
      std::string msg = "paused; resumes from checkpoint step " + step;
      if (!job->preempted_by.empty()) msg += " (preempted by " + job->preempted_by + ")";
      if (!a->failure.empty()) msg += " (" + a->failure + ")";
      auto paused = recorder_->Transition(a->job_id, JobState::kPaused, msg, end);
      if (paused.ok() && !job->preempted_by.empty()) {
        // A preempted job goes back to the queue by itself, behind the job that took its place.
        recorder_->Transition(a->job_id, JobState::kQueued,
                              "back in the queue after preemption by " + job->preempted_by +
                                  "; resumes from checkpoint step " + step,
                              {}, JobState::kPaused);
      }
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
      a->cluster_job.clear();
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

void AttemptMonitor::ReadDependenciesLocked(const JobRecord& job,
                                            const std::map<std::string, JobState>& active,
                                            std::string* pending, std::string* failed) {
  for (const std::string& id : job.after) {
    if (auto live = active.find(id); live != active.end()) {  // not ended: no read needed
      *pending += (pending->empty() ? "" : ", ") + id + " (" + JobStateName(live->second) + ")";
      continue;
    }
    auto dep = store_->GetJob(id);
    if (!dep.ok()) {
      if (failed->empty() && !job.after_any) {
        *failed = id + " is gone (" + dep.status().message() + ")";
      }
      continue;
    }
    if (!IsTerminal(dep->state)) {
      *pending += (pending->empty() ? "" : ", ") + id + " (" + JobStateName(dep->state) + ")";
    } else if (!job.after_any && dep->state != JobState::kSucceeded && failed->empty()) {
      *failed = id + " ended " + JobStateName(dep->state);
    }
  }
}

bool AttemptMonitor::DependenciesAllowStartLocked(const JobRecord& job,
                                                  const std::map<std::string, JobState>& active,
                                                  std::string* waiting) {
  // Slurm's afterok: one dependency that ended otherwise fails the job at once, without a rank.
  std::string pending, failed;
  ReadDependenciesLocked(job, active, &pending, &failed);
  if (!failed.empty()) {
    auto r = recorder_->Transition(job.id, JobState::kFailed,
                                   "dependency " + failed +
                                       "; no rank started (--after waits "
                                       "for SUCCEEDED; --after-any for any end)",
                                   {}, JobState::kQueued);
    if (!r.ok()) spdlog::error("job {}: {}", job.id, r.status().ToString());
    return false;
  }
  if (pending.empty()) return true;
  *waiting = "after " + pending + (job.after_any ? " (any end)" : "");
  return false;
}

void AttemptMonitor::DeviceSnapshotLocked(std::vector<std::string>* names,
                                          std::map<std::string, std::string>* busy) const {
  for (const Device& d : options_.devices) names->push_back(d.name);
  for (const auto& [id, a] : active_) {
    if (a.launcher != launcher_) continue;  // a cluster job holds none of this host's devices
    for (const auto& d : a.devices) (*busy)[d] = id;
  }
}

AttemptMonitor::PlannedPlacement AttemptMonitor::PlanPlacement(const JobRecord& job) {
  std::lock_guard<std::mutex> lock(mu_);
  PlannedPlacement plan;
  if (job.launcher != "local") {
    plan.wait_reason = "placed by " + job.launcher + " (submitted at once)";
    return plan;
  }
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) {
    plan.wait_reason = "unknown: " + jobs.status().ToString();
    return plan;
  }
  std::map<std::string, JobState> active;
  for (const JobRecord& j : jobs.value()) active[j.id] = j.state;
  // The dependencies as the scheduler would see them, read only (DependenciesAllowStartLocked
  // ends a job whose dependency failed).
  std::string pending, failed;
  ReadDependenciesLocked(job, active, &pending, &failed);
  if (!failed.empty()) {
    plan.wait_reason = "it would fail at once: dependency " + failed;
    return plan;
  }
  if (!pending.empty()) {
    plan.wait_reason = "after " + pending + (job.after_any ? " (any end)" : "");
    return plan;
  }
  std::vector<std::string> names;
  std::map<std::string, std::string> busy;
  DeviceSnapshotLocked(&names, &busy);
  std::vector<QueuedJob> queued;
  int64_t last_seq = 0;
  for (const JobRecord& j : jobs.value()) {
    last_seq = std::max(last_seq, j.seq);
    if (j.state != JobState::kQueued || j.launcher != "local") continue;
    // A job still waiting for its dependencies holds no place in the queue.
    const bool waits = std::any_of(j.after.begin(), j.after.end(),
                                   [&](const std::string& id) { return active.count(id) > 0; });
    if (!waits) queued.push_back({j.id, j.gpus, j.priority, j.seq});
  }
  queued.push_back({job.id, job.gpus, job.priority, last_seq + 1});
  ScheduleDecision d = Schedule(names, busy, queued, device_unit_, RunningJobsLocked(jobs.value()));
  for (const Placement& p : d.placements) {
    if (p.job_id == job.id) plan.devices = p.devices;
  }
  if (plan.devices.empty()) plan.wait_reason = d.wait_reasons[job.id];
  return plan;
}

std::vector<RunningJob> AttemptMonitor::RunningJobsLocked(const std::vector<JobRecord>& jobs) {
  std::vector<RunningJob> out;
  for (const JobRecord& j : jobs) {
    auto a = active_.find(j.id);
    if (a == active_.end() || a->second.launcher != launcher_ || a->second.devices.empty()) {
      continue;
    }
    RunningJob r{j.id, j.priority, j.seq, false, a->second.teardown, a->second.devices};
    const bool live = j.state == JobState::kStarting || j.state == JobState::kRunning;
    if (live && !r.stopping) {
      auto spec = recorder_->specs().Get(j);
      r.preemptible = spec.ok() && spec.value()->resources.preemptible;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<int> AttemptMonitor::ShrinkOptionsLocked(const JobRecord& job) {
  std::vector<int> out;
  if (job.preempted_by.empty() || job.gpus <= 1) return out;
  auto spec = recorder_->specs().Get(job);
  if (!spec.ok() || !spec.value()->resources.allow_shrink) return out;
  for (int k = job.gpus - 1; k >= 1; --k) {
    if (WithRankCount(*spec.value(), k, "resources.gpus").ok()) out.push_back(k);
  }
  return out;
}

void AttemptMonitor::PreemptLocked(const JobRecord& victim, const JobRecord& by, double now) {
  auto it = active_.find(victim.id);
  if (it == active_.end() || it->second.teardown) return;
  TransitionChanges c;
  c.preempted_by = by.id;
  const std::string message =
      "preempted by " + by.id + " (priority " + std::to_string(by.priority) + " over " +
      std::to_string(victim.priority) + ", needs " + std::to_string(by.gpus) + " " + device_unit_ +
      (by.gpus == 1 ? "" : "s") + "): pausing at a checkpoint (grace " +
      std::to_string(static_cast<int>(victim.grace_seconds)) + " s), then back in the queue";
  auto moved = recorder_->Transition(victim.id, JobState::kPausing, message, c, victim.state);
  if (!moved.ok()) return;  // it changed state meanwhile (ended, paused): nothing to preempt
  StartTeardownLocked(&it->second, victim.grace_seconds, now);
}

void AttemptMonitor::ScheduleLocked() {
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) {
    spdlog::error("scheduler: {}", jobs.status().ToString());
    return;
  }
  std::vector<std::string> names;
  std::map<std::string, std::string> busy;
  DeviceSnapshotLocked(&names, &busy);
  std::vector<QueuedJob> queued;
  std::map<std::string, JobRecord> by_id;
  std::map<std::string, std::string> waiting_for_jobs;  // job id → its dependencies' states
  std::map<std::string, JobState> active;               // what --after dependencies wait on
  for (const JobRecord& j : jobs.value()) active[j.id] = j.state;
  for (const JobRecord& j : jobs.value()) {
    if (j.state != JobState::kQueued) {
      by_id[j.id] = j;
      continue;
    }
    if (!j.after.empty()) {
      std::string waiting;
      if (!DependenciesAllowStartLocked(j, active, &waiting)) {
        if (!waiting.empty()) waiting_for_jobs[j.id] = waiting;
        continue;
      }
    }
    if (j.launcher != "local") {
      // The cluster's scheduler places these: submitted at once, one batch job per attempt.
      std::vector<std::string> ranks;
      for (int r = 0; r < j.gpus; ++r) ranks.push_back(j.launcher + ":" + std::to_string(r));
      Status st = LaunchLocked(j, ranks, /*is_restart=*/false);
      if (!st.ok()) spdlog::error("job {}: launch failed: {}", j.id, st.ToString());
      continue;
    }
    queued.emplace_back(j.id, j.gpus, j.priority, j.seq, ShrinkOptionsLocked(j));
    by_id[j.id] = j;
  }
  ScheduleDecision d = Schedule(names, busy, queued, device_unit_, RunningJobsLocked(jobs.value()));
  wait_reasons_ = d.wait_reasons;
  for (const auto& [id, why] : waiting_for_jobs) wait_reasons_[id] = why;
  const double now = clock_->Now();
  for (const Preemption& p : d.preemptions) PreemptLocked(by_id[p.victim], by_id[p.by], now);
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
    a.launcher = LauncherFor(job.launcher);
    a.cluster_job = job.cluster_job;
    a.devices = job.devices;
    a.grace_seconds = job.grace_seconds;
    a.launched_at = now;
    a.hang_timeout_seconds = job.hang_timeout_seconds;
    a.rendezvous_timeout_seconds = job.rendezvous_timeout_seconds;
    if (a.launcher == nullptr) {
      const std::string message = "adctld restarted without the " + job.launcher +
                                  " launcher this job's ranks run under (start it with "
                                  "--slurm): attempt " +
                                  std::to_string(job.attempt) + " is not watched";
      recorder_->AddEvent(job.id, job.attempt, "reconcile", "error", message);
      spdlog::error("job {}: {}", job.id, message);
      continue;
    }
    auto ranks = store_->ListRanks(job.id, job.attempt);
    if (!ranks.ok()) return ranks.status();
    int alive = 0;
    for (const RankRecord& r : ranks.value()) {
      RankProc p;
      p.rank = r.rank;
      p.pgid = r.pgid;
      p.start_time = r.pgid_start_time;
      p.cluster_job = job.cluster_job;
      p.is_child = false;
      p.exit_known = r.exited;
      p.exit_path = JobLayout(job.job_dir).rank_exit(job.attempt, r.rank);
      p.exited = r.exited && !a.launcher->HasLeftovers(Handle(p));
      p.group_killed_at = now;
      p.exit.exit_code = r.exit_code;
      p.exit.signal = r.exit_signal;
      if (!p.exited && a.launcher->Alive(Handle(p))) ++alive;
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
      // ... nor can a batch job it submitted, recorded or not: cancelled, so that the next
      // attempt is the only one.
      const std::string orphan =
          a.cluster_job.empty() ? a.launcher->FindAttempt(job.id, job.attempt) : a.cluster_job;
      if (!orphan.empty()) {
        a.launcher->EndAttempt(orphan);
        recorder_->AddEvent(job.id, job.attempt, "reconcile", "warning",
                            "cancelled Slurm job " + orphan + " of the interrupted attempt " +
                                std::to_string(job.attempt));
      }
    }
    if (job.state == JobState::kCancelling || job.state == JobState::kPausing) {
      StartTeardownLocked(&a, job.grace_seconds, now);
    }
    const std::string message = "adctld restarted: " + std::to_string(alive) + " of " +
                                std::to_string(expected) + " rank(s) of attempt " +
                                std::to_string(job.attempt) + " still alive, re-attached" +
                                (a.cluster_job.empty() ? "" : " (Slurm job " + a.cluster_job + ")");
    recorder_->AddEvent(job.id, job.attempt, "reconcile", "info", message);
    spdlog::info("job {}: {}", job.id, message);
    active_[job.id] = std::move(a);
  }
  return Status::Ok();
}

}  // namespace adctl
