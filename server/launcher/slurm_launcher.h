// The Slurm launcher: each attempt is one Slurm batch job.
//
// LaunchAttempt writes `<job-dir>/logs/attempt-A/slurm.sbatch` and submits it with
// `sbatch --parsable`: nodes × tasks per node from the spec, `--no-requeue` (adctld decides
// restarts), `--signal=USR1@<grace>` (ranks checkpoint and exit 75 before a time limit or a
// preemption), account / partition / QoS / time limit / extra flags from the spec or adctld's
// defaults. The script runs one `srun` with one task per rank (one GPU each,
// `--gpus-per-task=1 --gpu-bind=single:1`, or CPU tasks), each task under adctld's rank
// shepherd (`adctld rank-shepherd`, which writes the rank's exit file as the local shepherd
// does) and with `srun --output` into the rank's log file. Ranks read their rank, world size and
// local rank from SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (`adworker --ranks-from slurm`)
// and rendezvous through adctld as local ranks do. The job folder must be on a path every node
// sees at the same place.
//
// A rank ended when its exit file exists, or, without one, when the batch job is no longer
// active (squeue / scontrol: NODE_FAIL, PREEMPTED, TIMEOUT, CANCELLED: killed, retryable).
// When Slurm ends the batch job under its ranks (a time limit, a preemption, a node failure) a
// rank's end waits for the job's end state, so that the monitor can name it ("Slurm job 12
// ended TIMEOUT") and retry: while the job is COMPLETING, and, for ranks that stopped (exit 75)
// on Slurm's SIGUSR1 warning, until Slurm ends the job (the batch script does not exit after
// such a stop; adctld cancels the job when the stop was its own). Each wait is bounded.
// Signal() is `scancel --signal=SIG <job>` (SIGKILL: `scancel --full --signal=KILL` and
// `scancel`); a job still pending is cancelled outright. State is read from `squeue`, once per
// `poll_seconds` for all jobs this launcher watches (so a tick costs at most one squeue), and
// from `scontrol show job` for a job squeue no longer lists, and from `sacct` when scontrol has
// forgotten it too (past MinJobAge: e.g. after a long adctld outage) and the cluster keeps
// accounting. Thread-safe (one mutex).
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "server/launcher/launcher.h"

namespace adctl {

// adctld's Slurm settings (`slurm:` in adctld.yaml, `--slurm-*` flags).
struct SlurmOptions {
  bool enabled = false;  // --slurm (or any --slurm-* setting in the config): the launcher exists
  std::string account;
  std::string partition;
  std::string qos;
  std::string time_limit;
  std::vector<std::string> extra_args;
  bool gpus = true;       // false: CPU-only cluster (--slurm-cpu): ranks are CPU tasks
  int cpus_per_task = 0;  // 0: Slurm's default
  std::string bin_dir;    // where sbatch, squeue, scancel, scontrol are ("" : PATH)
  std::string shepherd;   // the rank shepherd binary (adctld itself; absolute path)
  double poll_seconds = 1.0;
};

// The batch job's name: "adctl-<job id>-a<attempt>" (how a restarted adctld finds it).
std::string SlurmJobName(const std::string& job_id, int attempt);
// Renders the batch script of an attempt (a pure function, tested).
std::string SlurmBatchScript(const AttemptLaunch& launch, const SlurmOptions& options,
                             const std::string& shepherd);
// The sbatch flags of an attempt, script excluded.
std::vector<std::string> SlurmBatchArgs(const AttemptLaunch& launch, const SlurmOptions& options);
// Parses `scontrol show job` output ("JobState=RUNNING Reason=None ... NodeList=n1").
ClusterJobInfo ParseScontrolJob(const std::string& text);
// Parses `sacct -n -P -X -o State,NodeList,Reason -j ID` output ("TIMEOUT|n1|TimeLimit"; a
// cancelled job's state reads "CANCELLED by 1000"); an empty state when there is no line.
ClusterJobInfo ParseSacctJob(const std::string& text);

class SlurmLauncher : public Launcher {
 public:
  explicit SlurmLauncher(SlurmOptions options);

  LauncherKind kind() const override { return LauncherKind::kSlurm; }
  Status CheckResources(const ResourceSpec& resources) const override;
  ClusterResources Cluster(const ResourceSpec& resources, double grace_seconds) const override;
  std::string ClusterJobNoun() const override { return "Slurm job"; }
  Result<LaunchedAttempt> LaunchAttempt(const AttemptLaunch& launch) override;
  Status Signal(const RankHandle& rank, int signal) override;
  bool ReapsItsRanks() const override { return false; }
  std::vector<EndedRank> Reap() override { return {}; }
  bool Alive(const RankHandle& rank) override;
  bool HasLeftovers(const RankHandle&) override { return false; }  // Slurm cleans up steps
  void KillLeftovers(const RankHandle&) override {}
  Result<ExitStatus> ReadExit(const std::string& exit_path) override;
  void EndAttempt(const std::string& cluster_job) override;
  ClusterJobInfo Describe(const std::string& cluster_job) override;
  std::string FindAttempt(const std::string& job_id, int attempt) override;

  // Whether the Slurm commands answer (`squeue --version`): adctld checks it at start.
  Status Check();

 private:
  std::string Tool(const std::string& name) const;
  // Runs a Slurm command; its stdout, or an error with its stderr.
  Result<std::string> Run(const std::vector<std::string>& argv);
  ClusterJobInfo DescribeLocked(const std::string& cluster_job);
  // Whether a rank that looks ended still waits for its batch job's end state: true until
  // `limit_seconds` after the first call for this rank.
  bool WaitForEndLocked(const RankHandle& rank, double limit_seconds);

  // Constant after construction.
  const SlurmOptions options_;

  std::mutex mu_;
  // The last squeue answer for the jobs watched: id → info, and when it was read.
  std::map<std::string, ClusterJobInfo> states_;  // guarded by mu_
  std::set<std::string> watched_;                 // guarded by mu_
  double polled_at_ = 0;                          // guarded by mu_
  std::map<std::string, double> signalled_;       // guarded by mu_; "job/signal" → when
  std::set<std::string> stopped_by_us_;           // guarded by mu_; jobs adctld signalled
  std::map<std::string, double> grace_;           // guarded by mu_; job → spec grace_seconds
  // guarded by mu_; "job/exit path" → when the rank began waiting for the job's end (Alive)
  std::map<std::string, double> waiting_since_;
};

}  // namespace adctl
