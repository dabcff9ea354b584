// The contract between adctld and adworker, in one place: the exit codes a rank returns (with
// the class the coordinator gives each) and the assignment a launcher hands a rank on its
// command line. Both sides compile this file, so a change to the contract changes both.
//
// The environment carries only what third-party libraries read (CUDA_VISIBLE_DEVICES, NCCL_*,
// OMP_NUM_THREADS) and the per-job secret (kWorkerTokenEnv); everything adctl itself reads
// comes through WorkerAssignment. The spec reaches the rank as a file (JobLayout::spec()).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

// --- Exit codes --------------------------------------------------------------------------------

constexpr int kExitOk = 0;             // training finished, final checkpoint committed
constexpr int kExitCrash = 1;          // unexpected error (bug, OOM, ...): retryable
constexpr int kExitBadSpec = 2;        // invalid spec or command line: never retried
constexpr int kExitDataError = 3;      // dataset missing/corrupt: never retried
constexpr int kExitModelError = 4;     // weights missing/mis-shaped/corrupt: never retried
constexpr int kExitStorageError = 5;   // an output cannot be written (permission, disk full)
constexpr int kExitNotFinite = 6;      // the loss or the gradients turned NaN/Inf: never retried
constexpr int kExitRollback = 7;       // the same, under train.nan_policy rollback: restarted
constexpr int kExitStopped = 75;       // stop requested (pause or cancel); checkpoint committed
constexpr int kExitTransient = 76;     // rendezvous/communication failure: retryable
constexpr int kExitNotExecuted = 127;  // the shell convention: the binary could not be executed

// Why a rank ends, with the exit code it ends with: what the worker's phases (training,
// preprocessing) return, as std::optional<Failure> (nullopt: go on). The libraries below them
// return Status; a phase gives each Status the code of what failed (a model file that does not
// load is kExitModelError wherever it is read).
struct Failure {
  int exit_code;
  std::string message;
};

enum class ExitClass {
  kSuccess,    // the rank finished
  kStopped,    // a stop was honoured; the checkpoint is committed
  kRetryable,  // a new attempt may succeed (also: unknown codes, killed by a signal)
  kFatal,      // the same attempt would fail again
};

struct ExitCodeInfo {
  int code;
  ExitClass exit_class;
  const char* description;  // "bad spec or command line"
};

// Every code the worker documents, in code order. README.md "Worker exit codes" is this table.
const std::vector<ExitCodeInfo>& WorkerExitCodes();
// The class of an exit code; an unknown code is retryable.
ExitClass ClassifyExitCode(int code);
// The description of a code, or "" for an unknown one.
std::string DescribeExitCode(int code);

// --- Launch ------------------------------------------------------------------------------------

// The environment variable that carries a rank's token (a secret: never on the command line).
constexpr char kWorkerTokenEnv[] = "ADCTL_TOKEN";
// A slurm attempt's ranks all get one environment: it carries the attempt's key instead, and
// the rank shepherd of each task turns it into that task's rank token (and drops it).
constexpr char kAttemptKeyEnv[] = "ADCTL_ATTEMPT_KEY";
// The token rank `rank` of an attempt reports with. `attempt_key` is the SHA-256 (hex) of the
// attempt's random token, which is what adctld keeps: adctld checks a rank's token without the
// secret, and a rank that holds its own cannot compute another rank's.
std::string RankToken(const std::string& attempt_key, int rank);
// The most metric points one ReportMetrics call may carry: adctld refuses a larger call
// (INVALID_ARGUMENT), and a rank sends a longer backlog in calls of this size.
constexpr size_t kMaxPointsPerReport = 1000;
// `--ranks-from` values.
constexpr char kRanksFromSlurm[] = "slurm";

// What one rank is asked to do: `adworker train <ToArgv()>`. Standalone runs leave coordinator
// empty (rendezvous through files in the job directory) and may omit everything but spec_path.
struct WorkerAssignment {
  std::string spec_path;  // the job spec file
  std::string job_dir;    // "": the spec file's directory
  std::string job_id = "local";
  int attempt = 1;
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;        // rank on this host; -1: same as rank
  int local_world_size = -1;  // ranks on this host; -1: same as world_size
  std::string coordinator;    // adctld's WorkerService host:port; "": standalone
  // "" : the rank flags above are given. "slurm": rank, world size and local rank come from
  // the task's environment when the rank starts (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
  // SLURM_NTASKS_PER_NODE); the rank flags must then be absent. The Slurm launcher writes one
  // command line for all tasks of an `srun`.
  std::string ranks_from;

  // The flags after `adworker train`, in a fixed order.
  std::vector<std::string> ToArgv() const;
  // Parses exactly the flags ToArgv writes (`--name value` or `--name=value`), fills the defaults
  // above (job_dir from spec_path) and checks the ranks. Anything else is an error.
  static Result<WorkerAssignment> FromArgs(const std::vector<std::string>& args);
  // The same, with the environment read through `getenv` (a test passes a map's lookup).
  static Result<WorkerAssignment> FromArgs(const std::vector<std::string>& args,
                                           const std::function<const char*(const char*)>& getenv);
  // Fills the defaults and checks the ranks (FromArgs calls it; adworker's own parser too).
  Status Resolve();

  bool operator==(const WorkerAssignment& o) const;
};

}  // namespace adctl
