#include "server/launcher/slurm_launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/job_layout.h"
#include "common/worker_contract.h"
#include "server/launcher/launchers.h"

namespace adctl {

namespace {

namespace fs = std::filesystem;

double MonotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A word for a bash script: single-quoted, with ' written as '\''.
std::string ShellQuote(const std::string& word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string Trim(const std::string& text) {
  const size_t b = text.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = text.find_last_not_of(" \t\r\n");
  return text.substr(b, e - b + 1);
}

struct CommandResult {
  int exit_code = -1;  // -1: unknown (the status was reaped elsewhere)
  std::string out;
  std::string err;
};

// fork/exec `argv` with `env` (nullptr: adctld's own), capturing stdout and stderr. Runs on the
// attempt monitor's thread, under its lock, like the local launcher's Reap() (waitpid(-1)), so
// no reaper takes this child's status; should one anyway, the exit code is unknown (-1).
Result<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                 const std::vector<std::string>* env) {
  std::vector<std::string> argv_copy = argv;
  std::vector<char*> args;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  std::vector<std::string> env_copy = env ? *env : std::vector<std::string>{};
  std::vector<char*> envp;
  for (auto& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Internal(std::string("pipe: ") + strerror(errno));
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = fork();
  if (pid == 0) {
    ResetSignalsForExec();
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
#ifdef SYS_close_range
    syscall(SYS_close_range, 3, ~0U, 0);
#endif
    if (env) {
      execvpe(args[0], args.data(), envp.data());
    } else {
      execvp(args[0], args.data());
    }
    const char msg[] = "exec failed\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Internal(std::string("fork: ") + strerror(fork_errno));
  }
  CommandResult r;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  const double deadline = MonotonicSeconds() + 60;  // a hung slurmctld must not hang adctld
  while (open_fds > 0 && MonotonicSeconds() < deadline) {
    if (poll(fds, 2, 1000) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (open_fds > 0) kill(pid, SIGKILL);
  int status = 0;
  pid_t w;
  while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (w == pid) {
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  if (open_fds > 0) return Unavailable(argv[0] + ": no answer within 60 s");
  return r;
}

bool IsActiveState(const std::string& state) {
  static const char* const kActive[] = {"PENDING",   "CONFIGURING", "RUNNING",
                                        "SUSPENDED", "REQUEUED",    "REQUEUE_HOLD",
                                        "RESIZING",  "SIGNALING",   "STAGE_OUT"};
  for (const char* s : kActive) {
    if (state == s) return true;
  }
  return false;
}

// How long a rank that left its exit file waits for its batch job's end state: while Slurm ends
// the job (COMPLETING: KillWait, epilog) ...
constexpr double kCompletingWaitSeconds = 60;
// ... and, after the ranks stopped on Slurm's warning (SIGUSR1 grace_seconds before the time
// limit), for the end itself: grace_seconds plus this (Slurm checks limits every 30 s, so the
// warning may come 30 s early and the end 30 s late).
constexpr double kWarnedWaitSeconds = 90;
constexpr double kDefaultGraceSeconds = 30;  // a re-attached job's (its spec is not at hand)

// The fields of one line of `squeue -o 'a|b'` or `sacct -P` output, trimmed.
std::vector<std::string> SplitFields(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  for (std::string part; std::getline(in, part, '|');) fields.push_back(Trim(part));
  return fields;
}

}  // namespace

bool ClusterJobInfo::active() const { return IsActiveState(state); }

bool ClusterJobInfo::ended_by_cluster() const {
  return state == "TIMEOUT" || state == "NODE_FAIL" || state == "PREEMPTED" || state == "BOOT_FAIL";
}

std::string SlurmJobName(const std::string& job_id, int attempt) {
  return "adctl-" + job_id + "-a" + std::to_string(attempt);
}

std::vector<std::string> SlurmBatchArgs(const AttemptLaunch& launch, const SlurmOptions& options) {
  const ClusterResources& c = launch.cluster;
  const JobLayout layout(launch.job_dir);
  std::vector<std::string> args = {
      "--parsable",
      "--job-name=" + SlurmJobName(launch.job_id, launch.attempt),
      "--nodes=" + std::to_string(c.nodes),
      "--ntasks-per-node=" + std::to_string(c.tasks_per_node),
      "--no-requeue",  // adctld decides restarts (a new attempt from the newest checkpoint)
      // Before a time limit or a preemption Slurm sends SIGUSR1 this long before the end: the
      // ranks checkpoint and exit 75 as they do on SIGTERM.
      "--signal=USR1@" + std::to_string(std::max(1, static_cast<int>(std::ceil(c.grace_seconds)))),
      "--chdir=" + launch.job_dir,
      "--output=" + layout.attempt_logs(launch.attempt) + "/slurm-%j.out",
  };
  if (c.gpus) {
    args.push_back("--gpus-per-task=1");
  } else if (options.cpus_per_task > 0) {
    args.push_back("--cpus-per-task=" + std::to_string(options.cpus_per_task));
  }
  auto pick = [](const std::string& spec, const std::string& fallback) {
    return spec.empty() ? fallback : spec;
  };
  const std::pair<const char*, std::string> kChoices[] = {
      {"--account=", pick(c.account, options.account)},
      {"--partition=", pick(c.partition, options.partition)},
      {"--qos=", pick(c.qos, options.qos)},
      {"--time=", pick(c.time_limit, options.time_limit)},
  };
  for (const auto& [flag, value] : kChoices) {
    if (!value.empty()) args.push_back(flag + value);
  }
  for (const auto& a : options.extra_args) args.push_back(a);
  for (const auto& a : c.extra_args) args.push_back(a);
  return args;
}

std::string SlurmBatchScript(const AttemptLaunch& launch, const SlurmOptions& options,
                             const std::string& shepherd) {
  const ClusterResources& c = launch.cluster;
  const JobLayout layout(launch.job_dir);
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# adctl job " << launch.job_id << ", attempt " << launch.attempt
    << ": written by adctld's slurm launcher. The ranks' environment (with the job's token) comes\n"
    << "# from sbatch's; each rank's exit file (logs/attempt-" << launch.attempt
    << "/rank-R.exit) tells adctld how it ended.\n"
    << "srun --ntasks=" << c.nodes * c.tasks_per_node << " --ntasks-per-node=" << c.tasks_per_node;
  if (c.gpus) {
    // One GPU per task, bound to it (Slurm sets the task's CUDA_VISIBLE_DEVICES).
    s << " --gpus-per-task=1 --gpu-bind=per_task:1";
  } else if (options.cpus_per_task > 0) {
    s << " --cpus-per-task=" << options.cpus_per_task;
  }
  s << " --kill-on-bad-exit=0 --open-mode=append \\\n"
    << "  --output=" << ShellQuote(layout.attempt_logs(launch.attempt) + "/rank-%t.log") << " \\\n"
    << "  " << ShellQuote(shepherd) << " rank-shepherd --job-dir " << ShellQuote(launch.job_dir)
    << " --attempt " << launch.attempt << " -- \\\n ";
  for (const std::string& a : launch.cluster_argv) s << " " << ShellQuote(a);
  s << "\n"
    << "rc=$?\n"
    << "# 75: the ranks checkpointed and stopped on a signal. adctld cancels this job at\n"
    << "# once when the signal was its own; after Slurm's (SIGUSR1 before the time limit) the\n"
    << "# job stays until Slurm ends it, so that its state says why (TIMEOUT).\n"
    << "if [ \"$rc\" = 75 ]; then exec sleep infinity; fi\n"
    << "exit \"$rc\"\n";
  return s.str();
}

ClusterJobInfo ParseScontrolJob(const std::string& text) {
  ClusterJobInfo info;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = word.substr(0, eq);
    const std::string value = word.substr(eq + 1);
    if (key == "JobState") info.state = value;
    if (key == "Reason") info.reason = value;
    if (key == "NodeList" && value != "(null)") info.nodes = value;
  }
  return info;
}

ClusterJobInfo ParseSacctJob(const std::string& text) {
  ClusterJobInfo info;
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return info;
  const std::vector<std::string> f = SplitFields(line);
  if (f.empty()) return info;
  info.state = f[0].substr(0, f[0].find(' '));  // "CANCELLED by 1000" → CANCELLED
  if (f.size() > 1 && f[1] != "None assigned") info.nodes = f[1];
  if (f.size() > 2) info.reason = f[2];
  return info;
}

SlurmLauncher::SlurmLauncher(SlurmOptions options) : options_(std::move(options)) {}

Status SlurmLauncher::CheckResources(const ResourceSpec& resources) const {
  if (resources.preemptible) {
    return InvalidArgument(
        "resources.preemptible: applies to jobs on adctld's own devices, and this job runs under "
        "Slurm; Slurm preempts by its partition's rules");
  }
  return Status::Ok();
}

ClusterResources SlurmLauncher::Cluster(const ResourceSpec& resources, double grace_seconds) const {
  ClusterResources c;
  c.nodes = static_cast<int>(resources.nodes);
  c.tasks_per_node = static_cast<int>(resources.gpus / resources.nodes);
  c.gpus = options_.gpus;
  c.cpus_per_task = options_.cpus_per_task;
  c.account = resources.slurm_account;
  c.partition = resources.slurm_partition;
  c.qos = resources.slurm_qos;
  c.time_limit = resources.slurm_time_limit;
  c.extra_args = resources.slurm_extra_args;
  c.grace_seconds = grace_seconds;
  return c;
}

std::string SlurmLauncher::Tool(const std::string& name) const {
  return options_.bin_dir.empty() ? name : options_.bin_dir + "/" + name;
}

Result<std::string> SlurmLauncher::Run(const std::vector<std::string>& argv) {
  auto r = RunCommand(argv, nullptr);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0 && r->exit_code != -1) {
    return Unavailable(argv[0] + " failed (exit " + std::to_string(r->exit_code) +
                       "): " + Trim(r->err.empty() ? r->out : r->err));
  }
  return r->out;
}

Status SlurmLauncher::Check() {
  auto v = Run({Tool("squeue"), "--version"});
  if (!v.ok()) return v.status();
  auto q = Run({Tool("squeue"), "-h", "-o", "%i"});
  if (!q.ok()) return Unavailable("Slurm does not answer: " + q.status().message());
  return Status::Ok();
}

Result<LaunchedAttempt> SlurmLauncher::LaunchAttempt(const AttemptLaunch& launch) {
  if (launch.ranks.empty() || launch.cluster_argv.empty()) {
    return InvalidArgument("slurm launcher: an attempt without ranks");
  }
  if (access(options_.shepherd.c_str(), X_OK) != 0) {
    return NotFound("slurm launcher: rank shepherd " + options_.shepherd + " not executable");
  }
  const JobLayout layout(launch.job_dir);
  std::error_code ec;
  fs::create_directories(layout.attempt_logs(launch.attempt), ec);
  if (ec) return Internal("cannot create " + layout.attempt_logs(launch.attempt));
  for (const RankLaunch& r : launch.ranks) fs::remove(r.exit_path, ec);
  const std::string script_path = layout.attempt_logs(launch.attempt) + "/slurm.sbatch";
  {
    std::ofstream out(script_path, std::ios::trunc);
    out << SlurmBatchScript(launch, options_, options_.shepherd);
    if (!out.flush()) return Internal("cannot write " + script_path);
  }
  std::vector<std::string> argv = {Tool("sbatch")};
  for (auto& a : SlurmBatchArgs(launch, options_)) argv.push_back(a);
  argv.push_back(script_path);
  // sbatch hands its environment to the job (--export=ALL): the ranks' planned environment,
  // token included, never their command line or the script.
  std::vector<std::string> env;
  for (const auto& [k, v] : launch.ranks[0].env) env.push_back(k + "=" + v);
  auto r = RunCommand(argv, &env);
  if (!r.ok()) return r.status();
  const std::string out = Trim(r->out);
  const std::string id = out.substr(0, out.find(';'));
  if (r->exit_code > 0 || id.empty() || id.find_first_not_of("0123456789_") != std::string::npos) {
    return Unavailable("sbatch failed (exit " + std::to_string(r->exit_code) +
                       "): " + Trim(r->err.empty() ? r->out : r->err));
  }
  LaunchedAttempt launched;
  launched.cluster_job = id;
  for (const RankLaunch& rank : launch.ranks) {
    RankHandle h;
    h.cluster_job = id;
    h.exit_path = rank.exit_path;
    launched.ranks.push_back(h);
  }
  std::lock_guard<std::mutex> lock(mu_);
  watched_.insert(id);
  grace_[id] = launch.cluster.grace_seconds;
  ClusterJobInfo pending;
  pending.state = "PENDING";
  states_[id] = pending;
  return launched;
}

ClusterJobInfo SlurmLauncher::DescribeLocked(const std::string& cluster_job) {
  watched_.insert(cluster_job);
  const double now = MonotonicSeconds();
  if (now - polled_at_ >= options_.poll_seconds || !states_.count(cluster_job)) {
    polled_at_ = now;
    std::string ids;
    for (const std::string& id : watched_) ids += (ids.empty() ? "" : ",") + id;
    auto out = Run({Tool("squeue"), "-h", "--states=all", "-j", ids, "-o", "%i|%T|%N|%r"});
    std::set<std::string> listed;
    if (out.ok()) {
      std::istringstream lines(out.value());
      std::string line;
      while (std::getline(lines, line)) {
        const std::vector<std::string> f = SplitFields(line);
        if (f.size() < 4) continue;
        ClusterJobInfo info;
        info.state = f[1];
        info.nodes = f[2];
        info.reason = f[3];
        states_[f[0]] = info;
        listed.insert(f[0]);
      }
    }
    // Jobs squeue no longer lists (or all of them, when it refused the list because every id
    // is unknown): ask scontrol, which still knows a job for MinJobAge after its end.
    for (const std::string& id : watched_) {
      if (listed.count(id)) continue;
      auto shown = Run({Tool("scontrol"), "show", "job", id});
      if (shown.ok()) {
        ClusterJobInfo info = ParseScontrolJob(shown.value());
        if (!info.state.empty()) {
          states_[id] = info;
          continue;
        }
      } else if (shown.status().message().find("Invalid job id") == std::string::npos) {
        continue;  // Slurm did not answer: keep what we knew
      }
      // Past MinJobAge only accounting remembers the job (sacct fails where there is none).
      auto accounted =
          Run({Tool("sacct"), "-n", "-P", "-X", "-o", "State,NodeList,Reason", "-j", id});
      if (accounted.ok()) {
        ClusterJobInfo info = ParseSacctJob(accounted.value());
        if (!info.state.empty()) {
          states_[id] = info;
          continue;
        }
      }
      ClusterJobInfo gone;
      gone.state = "GONE";
      gone.reason = "Slurm no longer knows the job";
      states_[id] = gone;
    }
  }
  return states_[cluster_job];
}

bool SlurmLauncher::Alive(const RankHandle& rank) {
  auto exit = ReadExitFile(rank.exit_path);
  std::lock_guard<std::mutex> lock(mu_);
  const ClusterJobInfo info = DescribeLocked(rank.cluster_job);
  if (!exit.ok()) {
    // Unknown (Slurm not answering yet): alive; the rank heartbeats say more. A job Slurm is
    // ending (COMPLETING) is waited for, so that the rank's end names Slurm's final state.
    if (info.state.empty() || info.active()) return true;
    return info.state == "COMPLETING" && WaitForEndLocked(rank, kCompletingWaitSeconds);
  }
  // The rank left its exit file. It counts as ended at once, unless its batch job is ending
  // under it: while Slurm ends the job (COMPLETING), and, when the rank stopped (exit 75) on a
  // signal adctld did not send (Slurm's SIGUSR1 before a time limit or a preemption), until
  // Slurm ends the job (the batch script stays: SlurmBatchScript), so that the rank's end names
  // Slurm's state (TIMEOUT, PREEMPTED) rather than a bare "stopped".
  if (info.state == "COMPLETING") return WaitForEndLocked(rank, kCompletingWaitSeconds);
  if (info.active() && exit->signal == 0 && exit->exit_code == kExitStopped &&
      !stopped_by_us_.count(rank.cluster_job)) {
    auto g = grace_.find(rank.cluster_job);
    const double grace = g == grace_.end() ? kDefaultGraceSeconds : g->second;
    return WaitForEndLocked(rank, grace + kWarnedWaitSeconds);
  }
  return false;
}

bool SlurmLauncher::WaitForEndLocked(const RankHandle& rank, double limit_seconds) {
  const double now = MonotonicSeconds();
  auto it = waiting_since_.emplace(rank.cluster_job + "/" + rank.exit_path, now).first;
  return now - it->second < limit_seconds;
}

Result<ExitStatus> SlurmLauncher::ReadExit(const std::string& exit_path) {
  return ReadExitFile(exit_path);
}

Status SlurmLauncher::Signal(const RankHandle& rank, int signal) {
  if (rank.cluster_job.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  const ClusterJobInfo info = DescribeLocked(rank.cluster_job);
  if (!info.state.empty() && !info.active()) return Status::Ok();
  // Every rank of the attempt is a task of one step: one scancel serves them all, so the
  // monitor's per-rank calls within a poll period are one.
  const std::string key = rank.cluster_job + "/" + std::to_string(signal);
  const double now = MonotonicSeconds();
  auto it = signalled_.find(key);
  if (it != signalled_.end() && now - it->second < options_.poll_seconds) return Status::Ok();
  signalled_[key] = now;
  stopped_by_us_.insert(rank.cluster_job);
  if (info.state == "PENDING" || signal == SIGKILL) {
    if (signal == SIGKILL && info.state != "PENDING") {
      (void)Run({Tool("scancel"), "--full", "--signal=KILL", rank.cluster_job});
    }
    auto r = Run({Tool("scancel"), rank.cluster_job});
    polled_at_ = 0;
    return r.ok() ? Status::Ok() : r.status();
  }
  auto r = Run({Tool("scancel"), "--signal=" + std::to_string(signal), rank.cluster_job});
  return r.ok() ? Status::Ok() : r.status();
}

void SlurmLauncher::EndAttempt(const std::string& cluster_job) {
  std::lock_guard<std::mutex> lock(mu_);
  const ClusterJobInfo info = DescribeLocked(cluster_job);
  if (info.active()) (void)Run({Tool("scancel"), cluster_job});
  watched_.erase(cluster_job);
  grace_.erase(cluster_job);
  stopped_by_us_.erase(cluster_job);
  for (auto* keyed : {&signalled_, &waiting_since_}) {
    for (auto it = keyed->begin(); it != keyed->end();) {
      it = it->first.rfind(cluster_job + "/", 0) == 0 ? keyed->erase(it) : std::next(it);
    }
  }
}

ClusterJobInfo SlurmLauncher::Describe(const std::string& cluster_job) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(cluster_job);
  return it == states_.end() ? ClusterJobInfo{} : it->second;
}

std::string SlurmLauncher::FindAttempt(const std::string& job_id, int attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto out = Run({Tool("squeue"), "-h", "--name=" + SlurmJobName(job_id, attempt), "-o", "%i"});
  if (!out.ok()) return "";
  std::istringstream lines(out.value());
  std::string id;
  std::getline(lines, id);
  return Trim(id);
}

// ---- The plugin: adctld's --slurm flags (a `slurm:` section of adctld.yaml).

namespace {

class SlurmPlugin : public LauncherPlugin {
 public:
  LauncherKind kind() const override { return LauncherKind::kSlurm; }
  bool HasEnableFlag() const override { return true; }
  bool Enabled() const override { return options_.enabled; }

  void AddFlags(CLI::App* app) override {
    app->add_flag(EnableFlag(), options_.enabled,
                  "enable the slurm launcher (each attempt one Slurm batch job; README \"Scaling "
                  "out\")");
    app->add_option("--slurm-account", options_.account, "default sbatch --account");
    app->add_option("--slurm-partition", options_.partition, "default sbatch --partition");
    app->add_option("--slurm-qos", options_.qos, "default sbatch --qos");
    app->add_option("--slurm-time-limit", options_.time_limit, "default sbatch --time");
    app->add_option("--slurm-extra-arg", options_.extra_args,
                    "one more sbatch flag for every slurm job (repeatable)")
        ->allow_extra_args(false);
    app->add_flag("--slurm-cpu", cpu_,
                  "Slurm ranks are CPU tasks (Gloo) instead of one GPU each (NCCL)");
    app->add_option("--slurm-cpus-per-task", options_.cpus_per_task,
                    "sbatch/srun --cpus-per-task of CPU ranks (0: Slurm's default)");
    app->add_option("--slurm-bin-dir", options_.bin_dir,
                    "folder of sbatch, squeue, scancel, scontrol (default: PATH)");
  }

  Result<std::unique_ptr<Launcher>> Start(const LauncherHost& host) override {
    SlurmOptions options = options_;
    options.enabled = true;
    options.gpus = !cpu_;
    // The batch script runs this very binary as each task's shepherd (`adctld
    // rank-shepherd`), so it must be at the same path on the nodes (a shared install).
    options.shepherd = host.adctld_binary;
    auto launcher = std::make_unique<SlurmLauncher>(options);
    const Status answer = launcher->Check();
    if (!answer.ok()) {
      return Unavailable("--slurm: " + answer.message() +
                         " (is slurmctld up, and SLURM_CONF set?)");
    }
    spdlog::info("slurm launcher on (partition {}, {} ranks)",
                 options.partition.empty() ? "default" : options.partition,
                 options.gpus ? "GPU" : "CPU");
    return std::unique_ptr<Launcher>(std::move(launcher));
  }

 private:
  SlurmOptions options_;
  bool cpu_ = false;  // --slurm-cpu
};

}  // namespace

std::unique_ptr<LauncherPlugin> SlurmLauncherPlugin() { return std::make_unique<SlurmPlugin>(); }

}  // namespace adctl
