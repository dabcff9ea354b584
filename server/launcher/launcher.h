// Starting rank processes: the seam between the supervisor and the OS.
//
// `Launcher` is the interface (tests and a future Slurm launcher implement it); `LocalLauncher`
// fork/execs on this host. Each rank runs under a small shepherd: a forked copy of adctld that
// makes itself a process-group leader, forks+execs the worker in that group, waits for it and
// writes how it ended to `exit_path` ("exit N" / "signal N") before exiting with the same
// status. The shepherd ignores SIGTERM, so `killpg(pgid, SIGTERM)` reaches only the worker, and
// its exit file survives an adctld restart: a restarted adctld that is not the parent reads the
// outcome from the file. SIGKILL of the group ends both. Workers are not killed when adctld
// dies (they re-attach through heartbeats). Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

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

class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual Result<LaunchedRank> Launch(const RankLaunch& launch) = 0;
  virtual Status Signal(pid_t pgid, int signal) = 0;
};

class LocalLauncher : public Launcher {
 public:
  Result<LaunchedRank> Launch(const RankLaunch& launch) override;
  Status Signal(pid_t pgid, int signal) override;
};

// Resolves the worker binary: an explicit path if given (must be executable), else `adworker`
// next to this process's own executable, else on PATH.
Result<std::string> ResolveWorkerBinary(const std::string& explicit_path);

}  // namespace adctl
