#include "common/worker_contract.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "common/sha256.h"

namespace adctl {

const std::vector<ExitCodeInfo>& WorkerExitCodes() {
  static const std::vector<ExitCodeInfo> kCodes = {
      {kExitOk, ExitClass::kSuccess, "finished"},
      {kExitCrash, ExitClass::kRetryable, "crash"},
      {kExitBadSpec, ExitClass::kFatal, "bad spec or command line"},
      {kExitDataError, ExitClass::kFatal, "data missing or corrupt"},
      {kExitModelError, ExitClass::kFatal, "model weights missing or corrupt"},
      {kExitStorageError, ExitClass::kFatal, "cannot write its output (permission or disk space)"},
      {kExitNotFinite, ExitClass::kFatal, "loss or gradients not finite"},
      {kExitRollback, ExitClass::kRetryable,
       "loss or gradients not finite: rolling back (train.nan_policy)"},
      {kExitStopped, ExitClass::kStopped, "stopped after checkpoint"},
      {kExitTransient, ExitClass::kRetryable, "rendezvous or communication failure"},
      {kExitNotExecuted, ExitClass::kRetryable, "worker binary could not be executed"},
  };
  return kCodes;
}

namespace {
const ExitCodeInfo* FindExitCode(int code) {
  for (const ExitCodeInfo& info : WorkerExitCodes()) {
    if (info.code == code) return &info;
  }
  return nullptr;
}
}  // namespace

ExitClass ClassifyExitCode(int code) {
  const ExitCodeInfo* info = FindExitCode(code);
  return info != nullptr ? info->exit_class : ExitClass::kRetryable;
}

std::string DescribeExitCode(int code) {
  const ExitCodeInfo* info = FindExitCode(code);
  return info != nullptr ? info->description : "";
}

std::string RankToken(const std::string& attempt_key, int rank) {
  return Sha256Hex(attempt_key + "/rank/" + std::to_string(rank));
}

// --- WorkerAssignment --------------------------------------------------------------------------

namespace {

// The flags, in ToArgv's order; FromArgs accepts exactly these.
enum class Flag {
  kSpec,
  kJobDir,
  kJobId,
  kAttempt,
  kRank,
  kWorldSize,
  kLocalRank,
  kLocalWorldSize,
  kCoordinator,
  kRanksFrom
};
const std::map<std::string, Flag>& FlagNames() {
  static const std::map<std::string, Flag> kNames = {
      {"--spec", Flag::kSpec},
      {"--job-dir", Flag::kJobDir},
      {"--job-id", Flag::kJobId},
      {"--attempt", Flag::kAttempt},
      {"--rank", Flag::kRank},
      {"--world-size", Flag::kWorldSize},
      {"--local-rank", Flag::kLocalRank},
      {"--local-world-size", Flag::kLocalWorldSize},
      {"--coordinator", Flag::kCoordinator},
      {"--ranks-from", Flag::kRanksFrom},
  };
  return kNames;
}

Result<int> ParseInt(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') {
    return InvalidArgument(flag + ": not an integer: '" + text + "'");
  }
  return static_cast<int>(value);
}

// The Slurm task variables a rank reads with `--ranks-from slurm` (srun sets them per task).
Status RanksFromSlurm(const std::function<const char*(const char*)>& getenv, WorkerAssignment* a) {
  auto read = [&](const char* name, bool required, int* out) -> Status {
    const char* value = getenv(name);
    if (value == nullptr || *value == '\0') {
      if (!required) return Status::Ok();
      return InvalidArgument(std::string("--ranks-from slurm: ") + name +
                             " is not set (run the rank as a task of `srun`)");
    }
    auto parsed = ParseInt(name, value);
    if (!parsed.ok()) return parsed.status();
    *out = *parsed;
    return Status::Ok();
  };
  ADCTL_RETURN_IF_ERROR(read("SLURM_PROCID", true, &a->rank));
  ADCTL_RETURN_IF_ERROR(read("SLURM_NTASKS", true, &a->world_size));
  ADCTL_RETURN_IF_ERROR(read("SLURM_LOCALID", true, &a->local_rank));
  ADCTL_RETURN_IF_ERROR(read("SLURM_NTASKS_PER_NODE", false, &a->local_world_size));
  if (a->local_world_size < 0) {
    int nodes = -1;
    ADCTL_RETURN_IF_ERROR(read("SLURM_NNODES", false, &nodes));
    if (nodes > 0 && a->world_size % nodes == 0) a->local_world_size = a->world_size / nodes;
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> WorkerAssignment::ToArgv() const {
  std::vector<std::string> argv = {"--spec", spec_path};
  if (!job_dir.empty()) argv.insert(argv.end(), {"--job-dir", job_dir});
  argv.insert(argv.end(), {"--job-id", job_id, "--attempt", std::to_string(attempt)});
  if (!ranks_from.empty()) {
    argv.insert(argv.end(), {"--ranks-from", ranks_from});
  } else {
    argv.insert(argv.end(),
                {"--rank", std::to_string(rank), "--world-size", std::to_string(world_size)});
    if (local_rank >= 0) argv.insert(argv.end(), {"--local-rank", std::to_string(local_rank)});
    if (local_world_size >= 0) {
      argv.insert(argv.end(), {"--local-world-size", std::to_string(local_world_size)});
    }
  }
  if (!coordinator.empty()) argv.insert(argv.end(), {"--coordinator", coordinator});
  return argv;
}

Result<WorkerAssignment> WorkerAssignment::FromArgs(const std::vector<std::string>& args) {
  return FromArgs(args, [](const char* name) -> const char* { return std::getenv(name); });
}

Result<WorkerAssignment> WorkerAssignment::FromArgs(
    const std::vector<std::string>& args, const std::function<const char*(const char*)>& getenv) {
  // `--name=value` is the same as `--name value`.
  std::vector<std::string> words;
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      words.push_back(arg.substr(0, eq));
      words.push_back(arg.substr(eq + 1));
    } else {
      words.push_back(arg);
    }
  }
  WorkerAssignment a;
  for (size_t i = 0; i < words.size(); i += 2) {
    auto it = FlagNames().find(words[i]);
    if (it == FlagNames().end()) return InvalidArgument("unknown argument '" + words[i] + "'");
    if (i + 1 >= words.size()) return InvalidArgument(words[i] + ": missing value");
    const std::string& value = words[i + 1];
    int* number = nullptr;
    switch (it->second) {
      case Flag::kSpec:
        a.spec_path = value;
        break;
      case Flag::kJobDir:
        a.job_dir = value;
        break;
      case Flag::kJobId:
        a.job_id = value;
        break;
      case Flag::kCoordinator:
        a.coordinator = value;
        break;
      case Flag::kRanksFrom:
        a.ranks_from = value;
        break;
      case Flag::kAttempt:
        number = &a.attempt;
        break;
      case Flag::kRank:
        number = &a.rank;
        break;
      case Flag::kWorldSize:
        number = &a.world_size;
        break;
      case Flag::kLocalRank:
        number = &a.local_rank;
        break;
      case Flag::kLocalWorldSize:
        number = &a.local_world_size;
        break;
    }
    if (number != nullptr) {
      auto parsed = ParseInt(words[i], value);
      if (!parsed.ok()) return parsed.status();
      *number = *parsed;
    }
  }
  if (!a.ranks_from.empty()) {
    if (a.ranks_from != kRanksFromSlurm) {
      return InvalidArgument("--ranks-from: unknown source '" + a.ranks_from + "' (known: slurm)");
    }
    for (const char* flag : {"--rank", "--world-size", "--local-rank", "--local-world-size"}) {
      if (std::find(words.begin(), words.end(), flag) != words.end()) {
        return InvalidArgument(std::string(flag) + " and --ranks-from slurm exclude each other");
      }
    }
    ADCTL_RETURN_IF_ERROR(RanksFromSlurm(getenv, &a));
  }
  ADCTL_RETURN_IF_ERROR(a.Resolve());
  return a;
}

Status WorkerAssignment::Resolve() {
  if (spec_path.empty()) return InvalidArgument("--spec is required");
  if (job_dir.empty()) {
    job_dir = std::filesystem::absolute(spec_path).parent_path().string();
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("bad rank " + std::to_string(rank) + " / world size " +
                           std::to_string(world_size));
  }
  if (local_rank < 0) local_rank = rank;
  if (local_world_size < 0) local_world_size = world_size;
  if (attempt < 1) return InvalidArgument("--attempt must be >= 1");
  return Status::Ok();
}

bool WorkerAssignment::operator==(const WorkerAssignment& o) const {
  return spec_path == o.spec_path && job_dir == o.job_dir && job_id == o.job_id &&
         attempt == o.attempt && rank == o.rank && world_size == o.world_size &&
         local_rank == o.local_rank && local_world_size == o.local_world_size &&
         coordinator == o.coordinator && ranks_from == o.ranks_from;
}

}  // namespace adctl
