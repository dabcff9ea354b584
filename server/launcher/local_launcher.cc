#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "server/launcher/launcher.h"
#include "server/launcher/launchers.h"
#include "server/launcher/process.h"
#include "server/launcher/shepherd.h"

namespace adctl {

namespace {

namespace fs = std::filesystem;

// --- Everything below up to Launch() runs in a forked child of a multi-threaded process:
// only async-signal-safe calls (no malloc, no locks, no stdio).

void WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

// "exit 12\n" without snprintf.
size_t FormatExit(char* buf, const char* kind, int value) {
  size_t n = 0;
  for (const char* p = kind; *p; ++p) buf[n++] = *p;
  buf[n++] = ' ';
  char digits[16];
  int d = 0;
  unsigned v = value < 0 ? 0u : static_cast<unsigned>(value);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (d > 0) buf[n++] = digits[--d];
  buf[n++] = '\n';
  return n;
}

void CloseFdsFrom(int first, int limit) {
#ifdef SYS_close_range
  if (syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
  for (int fd = first; fd < limit; ++fd) close(fd);
}

}  // namespace

// `log_fd` < 0: keep stdin/stdout/stderr and the process group (a Slurm task: srun owns them).
[[noreturn]] void RunShepherd(const char* executable, char* const* argv, char* const* envp,
                              int log_fd, const char* exit_path, const char* exit_tmp_path,
                              int fd_limit) {
  if (log_fd >= 0) {
    setpgid(0, 0);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
  }
  CloseFdsFrom(3, fd_limit);  // adctld's sockets and database must not outlive it here

  pid_t worker = fork();
  if (worker == 0) {
    ResetSignalsForExec();
    execve(executable, argv, envp);
    const char msg[] = "adctld launcher: execve failed for the worker binary\n";
    WriteAll(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  // The shepherd survives SIGTERM/SIGINT/SIGHUP to the group; SIGKILL still ends it. A stop
  // signal that reached the group before the worker existed is pending here: pass it on.
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  struct sigaction ign;
  memset(&ign, 0, sizeof(ign));
  ign.sa_handler = SIG_IGN;
  sigaction(SIGTERM, &ign, nullptr);
  sigaction(SIGINT, &ign, nullptr);
  sigaction(SIGHUP, &ign, nullptr);
  sigaction(SIGPIPE, &ign, nullptr);
  sigaction(SIGUSR1, &ign, nullptr);  // Slurm's --signal=USR1@grace is for the worker
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (worker > 0) {
    const int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
    for (int sig : kForwarded) {
      if (sigismember(&pending, sig)) kill(worker, sig);
    }
  }

  char buf[64];
  size_t n = 0;
  int code = 127;
  if (worker < 0) {
    n = FormatExit(buf, "exit", 127);
  } else {
    int status = 0;
    while (waitpid(worker, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(status)) {
      n = FormatExit(buf, "signal", WTERMSIG(status));
      code = 128 + WTERMSIG(status);
    } else {
      n = FormatExit(buf, "exit", WEXITSTATUS(status));
      code = WEXITSTATUS(status);
    }
  }
  int fd = open(exit_tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    WriteAll(fd, buf, n);
    fsync(fd);
    close(fd);
    rename(exit_tmp_path, exit_path);
  }
  _exit(code);
}

Status LocalLauncher::CheckResources(const ResourceSpec& resources) const {
  if (resources.nodes != 1 || resources.gpus_per_node != 0) {
    return InvalidArgument(
        "resources.nodes / resources.gpus_per_node: multi-node jobs need a cluster launcher "
        "(resources.launcher: slurm); this job's launcher is local");
  }
  return Status::Ok();
}

Result<LaunchedAttempt> LocalLauncher::LaunchAttempt(const AttemptLaunch& launch) {
  LaunchedAttempt out;
  for (size_t rank = 0; rank < launch.ranks.size(); ++rank) {
    const RankLaunch& l = launch.ranks[rank];
    auto launched = Launch(l);
    if (!launched.ok()) {
      for (const RankHandle& started : out.ranks) Signal(started.pgid, SIGKILL);
      return Status(launched.status().code(),
                    "rank " + std::to_string(rank) + ": " + launched.status().message());
    }
    RankHandle h;
    h.pgid = launched->pgid;
    h.start_time = launched->start_time;
    h.exit_path = l.exit_path;
    out.ranks.push_back(h);
  }
  return out;
}

Status LocalLauncher::Signal(const RankHandle& rank, int signal) {
  return SignalProcessGroup(rank.pgid, signal);
}

bool LocalLauncher::Alive(const RankHandle& rank) {
  return ProcessAlive(rank.pgid, rank.start_time);
}

bool LocalLauncher::HasLeftovers(const RankHandle& rank) { return ProcessGroupExists(rank.pgid); }

void LocalLauncher::KillLeftovers(const RankHandle& rank) {
  (void)SignalProcessGroup(rank.pgid, SIGKILL);
}

Result<LaunchedRank> LocalLauncher::Launch(const RankLaunch& launch) {
  if (access(launch.executable.c_str(), X_OK) != 0) {
    return NotFound("worker binary " + launch.executable + ": " + strerror(errno));
  }
  std::error_code ec;
  fs::create_directories(fs::path(launch.log_path).parent_path(), ec);
  fs::create_directories(fs::path(launch.exit_path).parent_path(), ec);
  fs::remove(launch.exit_path, ec);

  // Everything the child needs is prepared here, before fork().
  std::vector<std::string> env_strings;
  env_strings.reserve(launch.env.size());
  for (const auto& [k, v] : launch.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = launch.argv;
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string exit_tmp = launch.exit_path + ".tmp";
  struct rlimit rl;
  int fd_limit = 65536;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    fd_limit = static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 1 << 20));
  }
  int log_fd = open(launch.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return Internal("cannot open rank log " + launch.log_path + ": " + strerror(errno));
  }

  // Block signals across fork so no handler of adctld runs in the child.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork();
  if (pid == 0) {
    RunShepherd(launch.executable.c_str(), argv.data(), envp.data(), log_fd,
                launch.exit_path.c_str(), exit_tmp.c_str(), fd_limit);
  }
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(log_fd);
  if (pid < 0) return Internal(std::string("fork: ") + strerror(fork_errno));
  // Also set the group from the parent: no window where a killpg misses the child.
  setpgid(pid, pid);
  LaunchedRank out;
  out.pgid = pid;
  out.start_time = ProcessStartTime(pid);
  return out;
}

Status LocalLauncher::Signal(pid_t pgid, int signal) { return SignalProcessGroup(pgid, signal); }

std::vector<EndedRank> LocalLauncher::Reap() {
  std::vector<EndedRank> out;
  while (true) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    EndedRank ended;
    ended.pgid = pid;
    if (WIFSIGNALED(status)) {
      ended.exit = ExitStatus{0, WTERMSIG(status)};  // the shepherd itself was killed
    } else if (WIFEXITED(status) && WEXITSTATUS(status) < 128) {
      ended.exit = ExitStatus{WEXITSTATUS(status), 0};
    }  // >= 128: the shepherd's copy of a signal; only the exit file says which
    out.push_back(ended);
  }
  return out;
}

Result<ExitStatus> LocalLauncher::ReadExit(const std::string& exit_path) {
  return ReadExitFile(exit_path);
}

Result<std::string> ResolveWorkerBinary(const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    std::error_code ec;
    fs::path p = fs::absolute(explicit_path, ec);
    if (access(p.c_str(), X_OK) != 0) {
      return NotFound("--worker-binary " + explicit_path + ": not an executable file");
    }
    return p.string();
  }
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    self[n] = 0;
    fs::path beside = fs::path(self).parent_path() / "adworker";
    if (access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  const char* path_env = getenv("PATH");
  std::stringstream ss(path_env ? path_env : "");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    fs::path candidate = fs::path(dir) / "adworker";
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return NotFound(
      "adworker not found next to adctld or on PATH; pass --worker-binary /path/to/adworker");
}

// ---- The plugin: always on, no flags of its own.

namespace {

class LocalPlugin : public LauncherPlugin {
 public:
  LauncherKind kind() const override { return LauncherKind::kLocal; }
  Result<std::unique_ptr<Launcher>> Start(const LauncherHost&) override {
    return std::unique_ptr<Launcher>(std::make_unique<LocalLauncher>());
  }
};

}  // namespace

std::unique_ptr<LauncherPlugin> LocalLauncherPlugin() { return std::make_unique<LocalPlugin>(); }

}  // namespace adctl
