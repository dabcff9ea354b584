// The rank shepherd: the process between a launcher and one adworker. It forks+execs the worker,
// ignores the stop signals meant for the worker (SIGTERM, SIGINT, SIGHUP, SIGUSR1; so a
// signal to the whole group or Slurm step reaches the worker and the shepherd stays to record
// the outcome), waits for it and writes `exit_path` ("exit N" / "signal N", atomically through
// `exit_tmp_path`), then exits with the worker's status. Only async-signal-safe calls: it runs
// in a forked child of a multi-threaded adctld (LocalLauncher) or at the top of
// `adctld rank-shepherd` (a Slurm task).
#pragma once

namespace adctl {

// `log_fd` >= 0 (LocalLauncher): the shepherd leads a new process group and sends the worker's
// stdin to /dev/null and stdout/stderr to `log_fd`. < 0 (a Slurm task): both stay as srun set
// them. File descriptors from 3 up to `fd_limit` are closed either way.
[[noreturn]] void RunShepherd(const char* executable, char* const* argv, char* const* envp,
                              int log_fd, const char* exit_path, const char* exit_tmp_path,
                              int fd_limit);

// `adctld rank-shepherd --job-dir DIR --attempt A -- WORKER ARGS...`: a Slurm task's shepherd.
// The rank is SLURM_PROCID; the exit file is JobLayout(DIR).rank_exit(A, rank), as for a local
// rank. The worker command line runs as given (the launch plan's `--ranks-from slurm`: adworker
// reads SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID itself). Returns only on a usage error (exit
// code 2 and a message on stderr).
int RankShepherdMain(int argc, char** argv);

}  // namespace adctl
