// Small, testable wrappers over the process table (/proc) and process-group signals.
// Thread-safe (no state).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

// The start time of `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat), or 0 when
// there is no such process. Together with the pid it names one process across pid reuse.
uint64_t ProcessStartTime(pid_t pid);

// True when `pid` exists, is not a zombie, and (when `start_time` != 0) started at `start_time`.
bool ProcessAlive(pid_t pid, uint64_t start_time);

// True while a live (not zombie) process is in process group `pgid`.
bool ProcessGroupExists(pid_t pgid);

// The live processes whose command line has `flag` followed by `value` as two arguments (e.g.
// adworker's "--job-dir" and a job folder), from /proc/<pid>/cmdline.
std::vector<pid_t> ProcessesWithArgument(const std::string& flag, const std::string& value);

// killpg that treats "no such group" as success.
Status SignalProcessGroup(pid_t pgid, int signal);

// In a forked child before exec: every signal back to its default action and none blocked
// (adctld's handlers and masks must not reach a worker or a Slurm command). Async-signal-safe.
void ResetSignalsForExec();

// How a rank's process ended.
struct ExitStatus {
  int exit_code = 0;             // valid when signal == 0
  int signal = 0;                // killing signal, 0 on a normal exit
  std::string ToString() const;  // "exited with code 2" / "killed by signal 9 (Killed)"
};

// The launcher's per-rank exit file: "exit N" or "signal N".
Result<ExitStatus> ReadExitFile(const std::string& path);

}  // namespace adctl
