// Rank processes: the seam between the coordinator and the OS.
//
// `Launcher` is the interface the coordinator's attempt monitor works through: launch, signal,
// observe (reap, liveness, the rank's own exit record) and reconcile (is a rank started by an
// earlier adctld still there?). A Slurm launcher implements the same calls; the fault-injection
// tests implement it with a scripted process table (tests/server/fault_injection_test.cc).
// `LocalLauncher` fork/execs on this host. Each rank runs under a small shepherd: a forked copy of
// adctld that makes itself a process-group leader, forks+execs the worker in that group, waits for
// it and writes how it ended to `exit_path` ("exit N" / "signal N") before exiting with the same
// status. The shepherd ignores SIGTERM, so `killpg(pgid, SIGTERM)` reaches only the worker, and
// its exit file survives an adctld restart: a restarted adctld that is not the parent reads the
// outcome from the file. SIGKILL of the group ends both. Workers are not killed when adctld
// dies (they re-attach through heartbeats). Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/launcher/process.h"

namespace adctl {

struct RankLaunch {
  std::string executable;                                // absolute path
  std::vector<std::string> argv;                         // argv[0] included
  std::vector<std::pair<std::string, std::string>> env;  // the complete environment
  std::string log_path;   // stdout+stderr, appended; parent directories are created
  std::string exit_path;  // written by the shepherd when the worker ends
};

struct LaunchedRank {
  pid_t pgid = 0;           // == the shepherd's pid
  uint64_t start_time = 0;  // of the shepherd (ProcessStartTime)
};

// A launched rank that ended, as its launcher saw it end.
struct EndedRank {
  pid_t pgid = 0;
  // How it ended when the launcher knows (a wait status, a scheduler's record); nullopt when
  // it does not (then the rank's exit file, or else "killed", decides).
  std::optional<ExitStatus> exit;
};

class Launcher {
 public:
  virtual ~Launcher() = default;

  // --- Launch and signal.
  virtual Result<LaunchedRank> Launch(const RankLaunch& launch) = 0;
  // Signals every process of the rank; "no such rank" is not an error.
  virtual Status Signal(pid_t pgid, int signal) = 0;

  // --- Observe. Non-blocking.
  // Ranks launched by this process that ended since the last call (reaping them).
  virtual std::vector<EndedRank> Reap() = 0;
  // Whether a rank launched by an earlier adctld (adopted at reconcile) still runs; `start_time`
  // (LaunchedRank::start_time) guards against pid reuse.
  virtual bool Alive(pid_t pgid, uint64_t start_time) = 0;
  // Whether anything of the rank is left (a rank's teardown ends when nothing is).
  virtual bool GroupExists(pid_t pgid) = 0;
  // The rank's own record of how it ended (RankLaunch::exit_path); an error when there is none.
  virtual Result<ExitStatus> ReadExit(const std::string& exit_path) = 0;
};

// Ranks as shepherded process groups on this host. Reap() collects every child of adctld
// (waitpid(-1): adctld is a child subreaper, so orphans of ranks are reaped too).
class LocalLauncher : public Launcher {
 public:
  Result<LaunchedRank> Launch(const RankLaunch& launch) override;
  Status Signal(pid_t pgid, int signal) override;
  std::vector<EndedRank> Reap() override;
  bool Alive(pid_t pgid, uint64_t start_time) override;
  bool GroupExists(pid_t pgid) override;
  Result<ExitStatus> ReadExit(const std::string& exit_path) override;
};

// Resolves the worker binary: an explicit path if given (must be executable), else `adworker`
// next to this process's own executable, else on PATH.
Result<std::string> ResolveWorkerBinary(const std::string& explicit_path);

}  // namespace adctl
