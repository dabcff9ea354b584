// Rank processes: the seam between the coordinator and the OS (or a cluster's scheduler).
//
// `Launcher` is the interface the coordinator's attempt monitor works through, one attempt at a
// time: launch an attempt's ranks, signal a rank, observe ranks (reap, liveness, leftovers, the
// rank's own exit record), end the attempt, and describe its cluster job. Ranks started by an
// earlier adctld are re-attached from what the store kept of their handles (reconcile).
// Implementations:
//   LocalLauncher (here)      fork/exec on this host, one shepherd per rank (below)
//   SlurmLauncher             one Slurm batch job per attempt (slurm_launcher.h)
//   ScriptedLauncher          a scripted process table (tests/server/fault_injection_test.cc)
// adctld holds those it runs in a `Launchers` registry (launchers.h), by LauncherKind.
//
// `LocalLauncher`: each rank runs under a small shepherd: a forked copy of
// adctld that makes itself a process-group leader, forks+execs the worker in that group, waits for
// it and writes how it ended to `exit_path` ("exit N" / "signal N") before exiting with the same
// status. The shepherd ignores SIGTERM (and SIGUSR1), so `killpg(pgid, SIGTERM)` reaches only the
// worker, and its exit file survives an adctld restart: a restarted adctld that is not the parent
// reads the outcome from the file. SIGKILL of the group ends both. Workers are not killed when
// adctld dies (they re-attach through heartbeats). Thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
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

// What a cluster launcher needs beyond the ranks' command lines (from the spec's `resources`
// and adctld's defaults). The local launcher ignores it.
struct ClusterResources {
  int nodes = 1;
  int tasks_per_node = 1;  // ranks per node
  bool gpus = true;        // one GPU per task (--gpus-per-task=1); false: CPU tasks
  int cpus_per_task = 0;   // CPU tasks: cores each (0: the cluster's default)
  std::string account;
  std::string partition;
  std::string qos;
  std::string time_limit;  // sbatch --time ("" : the partition's default)
  std::vector<std::string> extra_args;
  double grace_seconds = 60;  // --signal=USR1@grace: ranks checkpoint before a time limit
};

// One attempt, as the monitor hands it to a launcher.
struct AttemptLaunch {
  std::string job_id;
  int attempt = 1;
  std::string job_dir;
  // One per rank, rank = index. A cluster launcher starts all ranks with one command line
  // (`ranks[0]` with `cluster_argv`: the same flags but `--ranks-from slurm`) and environment.
  std::vector<RankLaunch> ranks;
  std::vector<std::string> cluster_argv;
  ClusterResources cluster;
};

// One launched rank, as its launcher names it; the store keeps these fields (ranks.pgid,
// ranks.pgid_start_time, attempts.cluster_job) so that a restarted adctld re-attaches.
struct RankHandle {
  pid_t pgid = 0;           // local: the shepherd's process group; cluster: 0
  uint64_t start_time = 0;  // local: the shepherd's start time (guards pid reuse)
  std::string cluster_job;  // cluster: the batch job's id; local: ""
  std::string exit_path;    // RankLaunch::exit_path
};

struct LaunchedAttempt {
  std::string cluster_job;  // "" for the local launcher
  std::vector<RankHandle> ranks;
};

// What a cluster says about a batch job (`adctl describe`); empty when it knows nothing.
struct ClusterJobInfo {
  std::string state;    // Slurm's: PENDING, RUNNING, COMPLETED, TIMEOUT, NODE_FAIL, PREEMPTED, ...
  std::string nodes;    // node list
  std::string reason;   // why it is pending or how it ended
  bool active() const;  // PENDING, CONFIGURING, RUNNING, SUSPENDED, ... (not COMPLETING)
  // The cluster ended the job under its ranks: TIMEOUT, NODE_FAIL, PREEMPTED, BOOT_FAIL. Not the
  // ranks' fault: retryable, whatever they exited with.
  bool ended_by_cluster() const;
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

  // The kind a spec's resources.launcher names; adctld has at most one launcher of each
  // (launchers.h). name() is the spec's and the store's name of it ("local", "slurm").
  virtual LauncherKind kind() const = 0;
  std::string name() const { return Name(kind()); }

  // --- What it runs. Whether the ranks run on adctld's own devices: adctld's scheduler places
  // them (bounded by the host's devices; preemption and shrinking apply). Otherwise the cluster
  // places them and an attempt is handed over as soon as the job is queued.
  virtual bool OnAdctldDevices() const { return false; }
  // Submit's checks of the spec's resources for this launcher; the error names the field.
  virtual Status CheckResources(const ResourceSpec& resources) const {
    (void)resources;
    return Status::Ok();
  }
  // A cluster launcher: what an attempt asks of the cluster (AttemptLaunch::cluster), from the
  // spec and the launcher's own defaults.
  virtual ClusterResources Cluster(const ResourceSpec& resources, double grace_seconds) const {
    (void)resources;
    (void)grace_seconds;
    return {};
  }
  // How events name the cluster's job of an attempt ("Slurm job").
  virtual std::string ClusterJobNoun() const { return name() + " job"; }

  // --- Launch and signal.
  // Starts every rank of the attempt, or none (a failure ends what was started).
  virtual Result<LaunchedAttempt> LaunchAttempt(const AttemptLaunch& launch) = 0;
  // Signals the rank's processes; "no such rank" is not an error. A cluster launcher signals
  // the whole attempt (its ranks are the tasks of one job step).
  virtual Status Signal(const RankHandle& rank, int signal) = 0;

  // --- Observe. Non-blocking.
  // Whether the launcher reports the ends of the ranks it launched through Reap() (it is their
  // parent); otherwise, and for ranks re-attached after a restart, the monitor polls Alive().
  virtual bool ReapsItsRanks() const = 0;
  // Ranks launched by this process that ended since the last call (reaping them).
  virtual std::vector<EndedRank> Reap() = 0;
  // Whether the rank still runs (launched by an earlier adctld, or by a cluster).
  virtual bool Alive(const RankHandle& rank) = 0;
  // Whether anything of an ended rank is left (its teardown ends when nothing is), and ending it.
  virtual bool HasLeftovers(const RankHandle& rank) = 0;
  virtual void KillLeftovers(const RankHandle& rank) = 0;
  // The rank's own record of how it ended (RankLaunch::exit_path); an error when there is none.
  virtual Result<ExitStatus> ReadExit(const std::string& exit_path) = 0;

  // --- The attempt is over (every rank ended): free what is left of it (a cluster job still
  // finishing its batch script). Idempotent.
  virtual void EndAttempt(const std::string& cluster_job) { (void)cluster_job; }
  // Reconcile: the cluster job an earlier adctld submitted for this attempt but may not have
  // recorded (it died between submitting and writing the id); "" when none or not a cluster.
  virtual std::string FindAttempt(const std::string& job_id, int attempt) {
    (void)job_id;
    (void)attempt;
    return "";
  }
  // What the cluster says about the attempt's batch job, cached for a second or so.
  virtual ClusterJobInfo Describe(const std::string& cluster_job) {
    (void)cluster_job;
    return {};
  }
};

// Ranks as shepherded process groups on this host. Reap() collects every child of adctld
// (waitpid(-1): adctld is a child subreaper, so orphans of ranks are reaped too).
class LocalLauncher : public Launcher {
 public:
  LauncherKind kind() const override { return LauncherKind::kLocal; }
  bool OnAdctldDevices() const override { return true; }
  Status CheckResources(const ResourceSpec& resources) const override;
  Result<LaunchedAttempt> LaunchAttempt(const AttemptLaunch& launch) override;
  Status Signal(const RankHandle& rank, int signal) override;
  bool ReapsItsRanks() const override { return true; }
  std::vector<EndedRank> Reap() override;
  bool Alive(const RankHandle& rank) override;
  bool HasLeftovers(const RankHandle& rank) override;
  void KillLeftovers(const RankHandle& rank) override;
  Result<ExitStatus> ReadExit(const std::string& exit_path) override;

  // One rank (LaunchAttempt calls it per rank).
  Result<LaunchedRank> Launch(const RankLaunch& launch);
  Status Signal(pid_t pgid, int signal);
};

// Resolves the worker binary: an explicit path if given (must be executable), else `adworker`
// next to this process's own executable, else on PATH.
Result<std::string> ResolveWorkerBinary(const std::string& explicit_path);

}  // namespace adctl
