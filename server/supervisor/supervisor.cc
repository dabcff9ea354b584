#include "server/supervisor/supervisor.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "common/fs_util.h"
#include "common/job_layout.h"
#include "common/job_spec.h"
#include "server/scheduler/scheduler.h"
#include "server/supervisor/launch_plan.h"

extern char** environ;

namespace adctl {

namespace {

namespace fs = std::filesystem;

std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return out;
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Internal("cannot write " + tmp);
    out << text;
    if (!out.flush()) return Internal("cannot write " + tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Internal("cannot rename " + tmp + ": " + ec.message());
  return Status::Ok();
}

// Variables that must not leak from adctld's own environment into a rank.
}  // namespace

Supervisor::Supervisor(SupervisorOptions options, Store* store, Launcher* launcher,
                       SupervisorObserver* observer)
    : options_(std::move(options)), store_(store), launcher_(launcher), observer_(observer) {
  bool any_gpu = std::any_of(options_.devices.begin(), options_.devices.end(),
                             [](const Device& d) { return d.kind == "gpu"; });
  device_unit_ = any_gpu ? "GPU" : "CPU slot";
}

Supervisor::~Supervisor() { Stop(); }

Status Supervisor::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ADCTL_RETURN_IF_ERROR(ReconcileLocked());
    stopping_ = false;
  }
  tick_thread_ = std::thread([this] { TickLoop(); });
  return Status::Ok();
}

void Supervisor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    changed_cv_.notify_all();
  }
  if (tick_thread_.joinable()) tick_thread_.join();
}

void Supervisor::TickLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_cv_.wait_for(lock, std::chrono::milliseconds(options_.tick_ms),
                           [this] { return stopping_; });
      if (stopping_) return;
    }
    Tick();
  }
}

void Supervisor::NotifyLocked() {
  ++version_;
  changed_cv_.notify_all();
}

void Supervisor::WaitForChange(uint64_t* version, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  changed_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                       [&] { return version_ != *version || stopping_; });
  *version = version_;
}

Result<JobRecord> Supervisor::TransitionLocked(const std::string& job_id, JobState to,
                                               const std::string& message,
                                               const TransitionChanges& changes) {
  auto job = store_->Transition(job_id, std::nullopt, to, message, changes);
  if (job.ok()) {
    spdlog::info("job {}: {} ({})", job_id, JobStateName(to), message);
    if (IsTerminal(to) && observer_) observer_->OnJobFinished(job_id, to);
    NotifyLocked();
  } else {
    spdlog::warn("job {}: transition to {} refused: {}", job_id, JobStateName(to),
                 job.status().ToString());
  }
  return job;
}

// ---------------------------------------------------------------------------------------------
// JobService operations.

Result<std::pair<JobRecord, bool>> Supervisor::Submit(const SubmitRequest& request) {
  auto parsed = ParseJobSpec(request.spec_yaml, request.overrides);
  if (!parsed.ok()) return parsed.status();
  JobSpec spec = parsed.value();
  if (request.gpus) {
    if (*request.gpus < 1) {
      return InvalidArgument("gpus: must be >= 1, got " + std::to_string(*request.gpus));
    }
    spec.resources.gpus = *request.gpus;
  }
  if (request.priority) spec.resources.priority = *request.priority;
  ADCTL_RETURN_IF_ERROR(ValidateJobSpec(spec));
  if (spec.resources.gpus > static_cast<int64_t>(options_.devices.size())) {
    return InvalidArgument("resources.gpus: " + std::to_string(spec.resources.gpus) + " " +
                           device_unit_ + "s requested but this coordinator has " +
                           std::to_string(options_.devices.size()));
  }
  const std::string yaml = JobSpecToYaml(spec);

  if (!request.submission_id.empty()) {
    auto existing = store_->FindJobBySubmissionId(request.submission_id);
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      const JobRecord& job = **existing;
      if (job.spec_yaml != yaml) {
        return Status(StatusCode::kAlreadyExists, "submission id " + request.submission_id +
                                                      " was used for job " + job.id +
                                                      " with a different spec");
      }
      return std::make_pair(job, false);  // the same request, retried
    }
  }

  JobRecord job;
  for (int tries = 0; tries < 8; ++tries) {
    job.id = "j-" + RandomHex(3);
    if (store_->GetJob(job.id).status().code() == StatusCode::kNotFound) break;
  }
  job.name = spec.name;
  job.submission_id = request.submission_id;
  job.spec_yaml = yaml;
  job.token = RandomHex(16);
  job.job_dir = fs::absolute(options_.data_dir + "/jobs/" + job.id).string();
  job.state = JobState::kQueued;
  job.gpus = static_cast<int>(spec.resources.gpus);
  job.priority = static_cast<int>(spec.resources.priority);
  job.max_restarts = static_cast<int>(spec.resources.max_restarts);
  job.grace_seconds = spec.resources.grace_seconds;
  job.submitted_at = NowSeconds();
  job.progress.total_steps = spec.train.max_steps;
  std::error_code ec;
  fs::create_directories(JobLayout(job.job_dir).logs(), ec);
  if (ec) return Internal("cannot create " + job.job_dir + ": " + ec.message());
  ADCTL_RETURN_IF_ERROR(WriteFileAtomically(JobLayout(job.job_dir).spec(), yaml));
  Status inserted = store_->InsertJob(job);
  if (!inserted.ok()) {
    // A concurrent retry with the same submission id won the race.
    if (!request.submission_id.empty()) {
      auto existing = store_->FindJobBySubmissionId(request.submission_id);
      if (existing.ok() && existing->has_value()) {
        (void)RemoveTree(job.job_dir);
        return std::make_pair(**existing, false);
      }
    }
    return inserted;
  }
  spdlog::info("job {}: submitted ({} rank(s), priority {})", job.id, job.gpus, job.priority);
  std::lock_guard<std::mutex> lock(mu_);
  NotifyLocked();
  auto stored = store_->GetJob(job.id);
  if (!stored.ok()) return stored.status();
  return std::make_pair(stored.value(), true);
}

void Supervisor::StartTeardownLocked(ActiveAttempt* a, double grace_seconds, double now) {
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

Result<JobRecord> Supervisor::Cancel(const std::string& job_id, std::optional<double> grace,
                                     bool force) {
  std::lock_guard<std::mutex> lock(mu_);
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  const double g = force ? 0 : grace.value_or(job->grace_seconds);
  const double now = NowSeconds();
  auto it = active_.find(job_id);
  const bool has_processes =
      it != active_.end() && std::any_of(it->second.ranks.begin(), it->second.ranks.end(),
                                         [](const RankProc& r) { return !r.exited; });
  switch (job->state) {
    case JobState::kSucceeded:
    case JobState::kFailed:
    case JobState::kCancelled:
      return FailedPrecondition("cancel: job " + job_id + " already ended (" +
                                JobStateName(job->state) + ")");
    case JobState::kQueued:
    case JobState::kPaused:
      return TransitionLocked(job_id, JobState::kCancelled, "cancelled by user");
    case JobState::kRestarting:
      if (!has_processes) {
        if (it != active_.end()) active_.erase(it);
        TransitionChanges c;
        c.devices = std::vector<std::string>{};
        return TransitionLocked(job_id, JobState::kCancelled, "cancelled by user", c);
      }
      [[fallthrough]];
    default: {
      Result<JobRecord> out = job.value();
      if (job->state != JobState::kCancelling) {
        out = TransitionLocked(job_id, JobState::kCancelling,
                               force ? "cancel requested (force: SIGKILL)"
                                     : "cancel requested (grace " + std::to_string(int(g)) + " s)");
        if (!out.ok()) return out;
      }
      if (it == active_.end()) {
        // Nothing is running under this adctld: finish the cancel right away.
        return TransitionLocked(job_id, JobState::kCancelled, "cancelled by user");
      }
      StartTeardownLocked(&it->second, g, now);
      return out;
    }
  }
}

Result<JobRecord> Supervisor::Pause(const std::string& job_id, std::optional<double> grace) {
  std::lock_guard<std::mutex> lock(mu_);
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  const double g = grace.value_or(job->grace_seconds);
  auto it = active_.find(job_id);
  const bool has_processes =
      it != active_.end() && std::any_of(it->second.ranks.begin(), it->second.ranks.end(),
                                         [](const RankProc& r) { return !r.exited; });
  switch (job->state) {
    case JobState::kQueued:
      return TransitionLocked(job_id, JobState::kPaused, "paused by user before it started");
    case JobState::kRestarting:
      if (!has_processes) {
        if (it != active_.end()) active_.erase(it);
        TransitionChanges c;
        c.devices = std::vector<std::string>{};
        return TransitionLocked(job_id, JobState::kPaused, "paused by user", c);
      }
      return FailedPrecondition("pause: job " + job_id + " is restarting; try again shortly");
    case JobState::kStarting:
    case JobState::kRunning: {
      auto out = TransitionLocked(job_id, JobState::kPausing,
                                  "pause requested (grace " + std::to_string(int(g)) + " s)");
      if (!out.ok()) return out;
      if (it != active_.end()) StartTeardownLocked(&it->second, g, NowSeconds());
      return out;
    }
    default:
      return FailedPrecondition("pause: job " + job_id + " is " + JobStateName(job->state) +
                                "; only QUEUED, STARTING or RUNNING jobs can be paused");
  }
}

Result<JobRecord> Supervisor::Resume(const std::string& job_id, std::optional<int> gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (job->state != JobState::kPaused) {
    return FailedPrecondition("resume: job " + job_id + " is " + JobStateName(job->state) +
                              "; only PAUSED jobs can be resumed");
  }
  TransitionChanges c;
  std::string message = "resumed by user";
  if (gpus && *gpus != job->gpus) {
    if (*gpus < 1) return InvalidArgument("gpus: must be >= 1, got " + std::to_string(*gpus));
    if (*gpus > static_cast<int>(options_.devices.size())) {
      return InvalidArgument("gpus: " + std::to_string(*gpus) + " " + device_unit_ +
                             "s requested but this coordinator has " +
                             std::to_string(options_.devices.size()));
    }
    auto spec = ParseJobSpec(job->spec_yaml);
    if (!spec.ok()) return spec.status();
    JobSpec s = spec.value();
    const int64_t global_batch = s.GlobalBatch();
    const int64_t per_step = s.train.batch_size * *gpus;
    if (global_batch % per_step != 0) {
      return InvalidArgument(
          "gpus: cannot keep the global batch of " + std::to_string(global_batch) +
          " clips (train.batch_size " + std::to_string(s.train.batch_size) +
          " x train.grad_accum " + std::to_string(s.train.grad_accum) + " x " +
          std::to_string(s.resources.gpus) + " ranks) on " + std::to_string(*gpus) +
          " ranks: " + std::to_string(global_batch) +
          " is not a multiple of batch_size x ranks = " + std::to_string(per_step));
    }
    s.train.grad_accum = global_batch / per_step;
    s.resources.gpus = *gpus;
    ADCTL_RETURN_IF_ERROR(ValidateJobSpec(s));
    const std::string yaml = JobSpecToYaml(s);
    ADCTL_RETURN_IF_ERROR(WriteFileAtomically(JobLayout(job->job_dir).spec(), yaml));
    c.spec_yaml = yaml;
    c.gpus = *gpus;
    message = "resumed by user on " + std::to_string(*gpus) + " ranks (train.grad_accum " +
              std::to_string(s.train.grad_accum) + ", global batch " +
              std::to_string(global_batch) + " kept)";
  }
  return TransitionLocked(job_id, JobState::kQueued, message, c);
}

std::string Supervisor::WaitReason(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = wait_reasons_.find(job_id);
  return it == wait_reasons_.end() ? "" : it->second;
}

std::vector<DeviceStatus> Supervisor::Devices() {
  std::vector<Device> devices = options_.devices;
  RefreshNvmlMemory(&devices);
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeviceStatus> out;
  for (const Device& d : devices) {
    DeviceStatus s;
    s.device = d;
    for (const auto& [id, a] : active_) {
      if (std::find(a.devices.begin(), a.devices.end(), d.name) != a.devices.end()) s.job_id = id;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<RankRecord> Supervisor::LiveRanks(const std::string& job_id,
                                              std::map<int, bool>* alive) {
  auto job = store_->GetJob(job_id);
  if (!job.ok() || job->attempt == 0) return {};
  auto ranks = store_->ListRanks(job_id, job->attempt);
  if (!ranks.ok()) return {};
  std::lock_guard<std::mutex> lock(mu_);
  auto it = active_.find(job_id);
  for (const RankRecord& r : ranks.value()) {
    bool is_alive = false;
    if (it != active_.end() && it->second.attempt == r.attempt) {
      for (const RankProc& p : it->second.ranks) {
        if (p.rank == r.rank) is_alive = !p.exited;
      }
    }
    (*alive)[r.rank] = is_alive;
  }
  return ranks.value();
}

Status Supervisor::AddEvent(const std::string& job_id, int attempt, const std::string& kind,
                            const std::string& level, const std::string& message) {
  EventRecord e;
  e.job_id = job_id;
  e.attempt = attempt;
  e.kind = kind;
  e.level = level;
  e.message = message;
  auto id = store_->AddEvent(e);
  if (!id.ok()) {
    spdlog::warn("job {}: cannot record event '{}': {}", job_id, message, id.status().ToString());
    return id.status();
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Launching and supervising attempts.

Status Supervisor::LaunchLocked(const JobRecord& job, const std::vector<std::string>& devices,
                                bool is_restart) {
  const int attempt = job.attempt + 1;
  const double now = NowSeconds();
  ADCTL_RETURN_IF_ERROR(WriteFileAtomically(JobLayout(job.job_dir).spec(), job.spec_yaml));
  TransitionChanges c;
  c.attempt = attempt;
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
  auto started = TransitionLocked(job.id, JobState::kStarting, message, c);
  if (!started.ok()) return started.status();
  if (is_restart && observer_) observer_->OnRestart(job.id);

  ActiveAttempt a;
  a.job_id = job.id;
  a.attempt = attempt;
  a.devices = devices;
  a.grace_seconds = job.grace_seconds;
  a.launched_at = now;
  if (auto spec = ParseJobSpec(job.spec_yaml); spec.ok()) {
    a.hang_timeout_seconds = spec->resources.hang_timeout_seconds;
  }

  AttemptLaunchInput input;
  input.worker_binary = options_.worker_binary;
  input.coordinator = options_.coordinator_address;
  input.job_id = job.id;
  input.job_dir = job.job_dir;
  input.token = job.token;
  input.attempt = attempt;
  input.devices = devices;
  input.host_slots = options_.devices.size();
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
      TransitionLocked(
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

void Supervisor::ReapChildrenLocked() {
  while (true) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    reaped_[pid] = status;
  }
}

void Supervisor::UpdateAttemptLocked(ActiveAttempt* a, double now) {
  for (RankProc& r : a->ranks) {
    if (r.exited) continue;
    if (r.exit_known) {
      // Whatever the rank left in its group got SIGKILL; the rank counts as gone once the
      // group is empty (bounded: an unreaped zombie must not hold the job forever).
      if (!ProcessGroupExists(r.pgid) || now - r.group_killed_at > 5) r.exited = true;
      continue;
    }
    int wait_status = -1;
    bool gone = false;
    if (r.is_child) {
      auto it = reaped_.find(r.pgid);
      if (it != reaped_.end()) {
        gone = true;
        wait_status = it->second;
        reaped_.erase(it);
      }
    } else {
      gone = !ProcessAlive(r.pgid, r.start_time);
    }
    if (!gone) continue;

    ExitStatus st;
    auto from_file = ReadExitFile(r.exit_path);
    if (from_file.ok()) {
      st = from_file.value();
    } else if (wait_status >= 0 && WIFSIGNALED(wait_status)) {
      st.signal = WTERMSIG(wait_status);  // the shepherd itself was killed (our SIGKILL)
    } else if (wait_status >= 0 && WEXITSTATUS(wait_status) < 128) {
      st.exit_code = WEXITSTATUS(wait_status);
    } else {
      st.signal = SIGKILL;  // ended while nobody watched, without a word: count it as killed
    }
    r.exit_known = true;
    r.exit = st;
    launcher_->Signal(r.pgid, SIGKILL);  // anything the rank left behind in its group
    r.group_killed_at = now;
    r.exited = !ProcessGroupExists(r.pgid);
    store_->RecordRankExit(a->job_id, a->attempt, r.rank, st.exit_code, st.signal);

    ExitClass cls = ClassifyExit(st);
    const std::string message = "rank " + std::to_string(r.rank) + " " + DescribeExit(st);
    AddEvent(a->job_id, a->attempt, "rank_exit",
             (cls == ExitClass::kSuccess || cls == ExitClass::kStopped) ? "info" : "error",
             message);
    NotifyLocked();
    spdlog::info("job {} attempt {}: {}", a->job_id, a->attempt, message);

    const bool failed = cls == ExitClass::kRetryable || cls == ExitClass::kFatal ||
                        (cls == ExitClass::kStopped && !a->teardown);
    if (failed && a->failure.empty() && !(a->teardown && a->killed)) {
      a->failure = "rank " + std::to_string(r.rank) + " " + DescribeExit(st);
      a->failure_class = cls == ExitClass::kFatal ? ExitClass::kFatal : ExitClass::kRetryable;
    }
    if (failed && !a->teardown) {
      // One rank down takes the attempt down: the others would hang in their collectives.
      StartTeardownLocked(a, a->grace_seconds, now);
    }
  }
  if (a->hang_timeout_seconds > 0 && !a->teardown && !a->ranks.empty()) {
    auto job = store_->GetJob(a->job_id);
    if (job.ok() && job->state == JobState::kRunning) {
      const double last_progress = std::max(job->progress.updated_at, a->launched_at);
      if (now - last_progress > a->hang_timeout_seconds) {
        a->failure = "no training progress for " +
                     std::to_string(static_cast<int>(now - last_progress)) +
                     " s (resources.hang_timeout_seconds " +
                     std::to_string(static_cast<int>(a->hang_timeout_seconds)) + ")";
        a->failure_class = ExitClass::kRetryable;
        AddEvent(a->job_id, a->attempt, "hang", "error", a->failure + "; stopping the attempt");
        StartTeardownLocked(a, a->grace_seconds, now);
      }
    }
  }
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
      AddEvent(a->job_id, a->attempt, "teardown", "warning",
               "grace period over: SIGKILL sent to the remaining ranks");
    }
  }
}

bool Supervisor::FinishAttemptLocked(ActiveAttempt* a, double now) {
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
    TransitionLocked(a->job_id, JobState::kSucceeded,
                     "finished: all " + std::to_string(a->ranks.size()) + " rank(s) exited 0", end);
    return false;
  }
  switch (state) {
    case JobState::kCancelling:
      TransitionLocked(a->job_id, JobState::kCancelled, "cancelled by user", end);
      return false;
    case JobState::kPausing: {
      std::string msg = "paused; resumes from checkpoint step " +
                        std::to_string(job->progress.last_checkpoint_step);
      if (!a->failure.empty()) msg += " (" + a->failure + ")";
      TransitionLocked(a->job_id, JobState::kPaused, msg, end);
      return false;
    }
    case JobState::kStarting:
    case JobState::kRunning: {
      if (a->failure.empty()) a->failure = summary, a->failure_class = ExitClass::kRetryable;
      if (a->failure_class == ExitClass::kFatal) {
        TransitionLocked(a->job_id, JobState::kFailed,
                         a->failure + "; not retried. See " +
                             JobLayout(job->job_dir).attempt_logs(a->attempt) + "/",
                         end);
        return false;
      }
      if (job->restarts >= job->max_restarts) {
        TransitionLocked(a->job_id, JobState::kFailed,
                         a->failure + "; restarts exhausted (" + std::to_string(job->restarts) +
                             "/" + std::to_string(job->max_restarts) + ")",
                         end);
        return false;
      }
      TransitionChanges keep;  // RESTARTING keeps its devices for the next attempt
      keep.end_attempt_reason = end.end_attempt_reason;
      auto r = TransitionLocked(a->job_id, JobState::kRestarting,
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

void Supervisor::ScheduleLocked() {
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

void Supervisor::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  ReapChildrenLocked();
  const double now = NowSeconds();
  std::vector<std::string> relaunch;
  for (auto it = active_.begin(); it != active_.end();) {
    ActiveAttempt& a = it->second;
    UpdateAttemptLocked(&a, now);
    const bool all_exited =
        std::all_of(a.ranks.begin(), a.ranks.end(), [](const RankProc& r) { return r.exited; });
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

Status Supervisor::ReconcileLocked() {
  auto jobs = store_->ListActiveJobs();
  if (!jobs.ok()) return jobs.status();
  const double now = NowSeconds();
  for (const JobRecord& job : jobs.value()) {
    if (!HasLiveAttempt(job.state)) continue;
    ActiveAttempt a;
    a.job_id = job.id;
    a.attempt = job.attempt;
    a.devices = job.devices;
    a.grace_seconds = job.grace_seconds;
    a.launched_at = now;
    if (auto spec = ParseJobSpec(job.spec_yaml); spec.ok()) {
      a.hang_timeout_seconds = spec->resources.hang_timeout_seconds;
    }
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
      p.exited = r.exited && !ProcessGroupExists(r.pgid);
      p.group_killed_at = now;
      p.exit.exit_code = r.exit_code;
      p.exit.signal = r.exit_signal;
      p.exit_path = JobLayout(job.job_dir).rank_exit(job.attempt, r.rank);
      if (!p.exited && ProcessAlive(p.pgid, p.start_time)) ++alive;
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
    AddEvent(job.id, job.attempt, "reconcile", "info", message);
    spdlog::info("job {}: {}", job.id, message);
    active_[job.id] = std::move(a);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// WorkerService operations.

Status Supervisor::Authorize(const std::string& job_id, const std::string& token) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (token.empty() || token != job->token) {
    return Status(StatusCode::kPermissionDenied, "job " + job_id + ": wrong or missing token");
  }
  return Status::Ok();
}

namespace {

Status CheckCurrentAttempt(const JobRecord& job, int attempt) {
  if (attempt != job.attempt) {
    return FailedPrecondition("job " + job.id + ": attempt " + std::to_string(attempt) +
                              " superseded by attempt " + std::to_string(job.attempt));
  }
  if (IsTerminal(job.state)) {
    return FailedPrecondition("job " + job.id + " already ended (" + JobStateName(job.state) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status Supervisor::RegisterRank(const std::string& job_id, int attempt, int rank, int world_size,
                                int pid, const std::string& host) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  ADCTL_RETURN_IF_ERROR(CheckCurrentAttempt(job.value(), attempt));
  if (world_size != job->gpus || rank < 0 || rank >= world_size) {
    return InvalidArgument("rank " + std::to_string(rank) + " of world size " +
                           std::to_string(world_size) + " does not match job " + job_id + " (" +
                           std::to_string(job->gpus) + " ranks)");
  }
  ADCTL_RETURN_IF_ERROR(store_->RecordRankWorker(job_id, attempt, rank, pid, host, NowSeconds()));
  AddEvent(job_id, attempt, "worker", "info",
           "rank " + std::to_string(rank) + " registered (pid " + std::to_string(pid) + " on " +
               host + ")");
  std::lock_guard<std::mutex> lock(mu_);
  NotifyLocked();
  return Status::Ok();
}

Result<std::pair<bool, std::string>> Supervisor::Heartbeat(const std::string& job_id, int attempt,
                                                           int rank, int64_t /*step*/, int pid) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (attempt != job->attempt || IsTerminal(job->state)) {
    return std::make_pair(true, std::string("attempt superseded"));
  }
  const double now = NowSeconds();
  if (pid > 0) {
    // Registers the pid when the registration was lost (adctld restarted in between).
    auto ranks = store_->ListRanks(job_id, attempt);
    if (ranks.ok()) {
      for (const RankRecord& r : ranks.value()) {
        if (r.rank == rank && r.worker_pid != pid) {
          store_->RecordRankWorker(job_id, attempt, rank, pid, r.host, now);
        }
      }
    }
  }
  store_->RecordHeartbeat(job_id, attempt, rank, now);
  if (job->state == JobState::kCancelling) return std::make_pair(true, std::string("cancel"));
  if (job->state == JobState::kPausing) return std::make_pair(true, std::string("pause"));
  return std::make_pair(false, std::string());
}

Status Supervisor::KvSet(const std::string& job_id, int attempt, const std::string& key,
                         const std::string& value) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  ADCTL_RETURN_IF_ERROR(CheckCurrentAttempt(job.value(), attempt));
  ADCTL_RETURN_IF_ERROR(store_->KvSet(job_id, attempt, key, value));
  std::lock_guard<std::mutex> lock(mu_);
  NotifyLocked();
  return Status::Ok();
}

Result<std::optional<std::string>> Supervisor::KvGet(const std::string& job_id, int attempt,
                                                     const std::string& key, int timeout_ms) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  ADCTL_RETURN_IF_ERROR(CheckCurrentAttempt(job.value(), attempt));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::clamp(timeout_ms, 0, 30000));
  uint64_t version = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    version = version_;
  }
  while (true) {
    auto value = store_->KvGet(job_id, attempt, key);
    if (!value.ok() || value->has_value()) return value;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::optional<std::string>();
    WaitForChange(&version, static_cast<int>(std::min<int64_t>(left.count(), 500)));
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("adctld is shutting down");
  }
}

Status Supervisor::ReportMetrics(const std::string& job_id, int attempt, int rank,
                                 std::vector<MetricRecord> points) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (attempt != job->attempt) return Status::Ok();  // late points of an old attempt: dropped
  for (MetricRecord& m : points) {
    m.job_id = job_id;
    m.attempt = attempt;
    m.rank = rank;
    if (m.time == 0) m.time = NowSeconds();
  }
  ADCTL_RETURN_IF_ERROR(store_->AddMetrics(points));
  if (observer_) observer_->OnMetrics(points);
  std::lock_guard<std::mutex> lock(mu_);
  if (job->state == JobState::kStarting && !points.empty()) {
    TransitionLocked(job_id, JobState::kRunning, "training (first step reported)");
  }
  NotifyLocked();
  return Status::Ok();
}

Status Supervisor::ReportTrainingStarted(const std::string& job_id, int attempt, int rank,
                                         int64_t resumed_from_step, int64_t total_steps) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (attempt != job->attempt) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (rank == 0 && job->state == JobState::kStarting) {
    std::string msg = resumed_from_step > 0
                          ? "training resumed from checkpoint step " +
                                std::to_string(resumed_from_step) + " of " +
                                std::to_string(total_steps)
                          : "training started (" + std::to_string(total_steps) + " steps)";
    TransitionLocked(job_id, JobState::kRunning, msg);
  }
  return Status::Ok();
}

Status Supervisor::ReportCheckpoint(const std::string& job_id, int attempt, int /*rank*/,
                                    CheckpointRecord checkpoint) {
  checkpoint.job_id = job_id;
  checkpoint.attempt = attempt;
  if (checkpoint.created_at == 0) checkpoint.created_at = NowSeconds();
  ADCTL_RETURN_IF_ERROR(store_->AddCheckpoint(checkpoint));
  AddEvent(job_id, attempt, "checkpoint", "info",
           "checkpoint step " + std::to_string(checkpoint.step) + " committed: " + checkpoint.path);
  if (observer_) observer_->OnCheckpoint(checkpoint);
  std::lock_guard<std::mutex> lock(mu_);
  NotifyLocked();
  return Status::Ok();
}

Status Supervisor::ReportWorkerEvent(const std::string& job_id, int attempt, int rank,
                                     const std::string& level, const std::string& message) {
  ADCTL_RETURN_IF_ERROR(AddEvent(job_id, attempt, "worker", level.empty() ? "info" : level,
                                 "rank " + std::to_string(rank) + ": " + message));
  std::lock_guard<std::mutex> lock(mu_);
  NotifyLocked();
  return Status::Ok();
}

}  // namespace adctl
