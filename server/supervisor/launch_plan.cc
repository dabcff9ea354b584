#include "server/supervisor/launch_plan.h"

#include <algorithm>
#include <set>
#include <thread>

#include "common/job_layout.h"
#include "common/sha256.h"
#include "common/worker_contract.h"

namespace adctl {
namespace {

bool IsRankOwnedVariable(const std::string& key) {
  return key.rfind("ADCTL_", 0) == 0 || key == "RANK" || key == "LOCAL_RANK" ||
         key == "WORLD_SIZE" || key == "CUDA_VISIBLE_DEVICES" || key == "CUDA_DEVICE_ORDER" ||
         key == "LOCAL_WORLD_SIZE";
}

bool IsCpu(const AttemptLaunchInput& input) {
  if (input.cluster) return !input.cluster_gpus;
  return !input.devices.empty() && input.devices[0].rfind("cpu", 0) == 0;
}

}  // namespace

EnvList WorkerBaseEnvironment(const std::vector<std::string>& inherited,
                              const AttemptLaunchInput& input) {
  EnvList env;
  std::set<std::string> present;
  for (const std::string& kv : inherited) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string key = kv.substr(0, eq);
    if (IsRankOwnedVariable(key)) continue;
    present.insert(key);
    env.emplace_back(key, kv.substr(eq + 1));
  }
  auto add_default = [&](const std::string& key, const std::string& value) {
    if (present.insert(key).second) env.emplace_back(key, value);
  };
  // The operator's --worker-ifname / --worker-env first, then adctld's own defaults.
  if (!input.worker_ifname.empty()) {
    add_default("NCCL_SOCKET_IFNAME", input.worker_ifname);
    add_default("GLOO_SOCKET_IFNAME", input.worker_ifname);
  }
  for (const auto& [k, v] : input.worker_env) add_default(k, v);
  const std::pair<const char*, const char*> kSafetyDefaults[] = {
      {"NCCL_NVLS_ENABLE", "0"},
      {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
      {"NVSHMEM_DISABLE_NVLS", "1"},
  };
  for (const auto& [k, v] : kSafetyDefaults) add_default(k, v);
  if (input.cluster && IsCpu(input)) {
    // The cluster sizes the task; adctld's host says nothing about the node's cores.
    add_default("OMP_NUM_THREADS", std::to_string(std::max(1, input.cpus_per_task)));
  } else if (IsCpu(input) && !present.count("OMP_NUM_THREADS")) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const unsigned per_rank =
        std::max(1u, cores / static_cast<unsigned>(std::max<size_t>(1, input.host_slots)));
    env.emplace_back("OMP_NUM_THREADS", std::to_string(per_rank));
  }
  return env;
}

std::vector<RankLaunch> PlanAttemptLaunch(const AttemptLaunchInput& input,
                                          const EnvList& base_env) {
  const JobLayout layout(input.job_dir);
  const bool cpu = IsCpu(input);
  const int world = static_cast<int>(input.devices.size());
  std::vector<RankLaunch> plan;
  for (int rank = 0; rank < world; ++rank) {
    WorkerAssignment assignment;
    assignment.spec_path = layout.spec();
    assignment.job_dir = input.job_dir;
    assignment.job_id = input.job_id;
    assignment.attempt = input.attempt;
    assignment.rank = rank;
    assignment.world_size = world;
    assignment.local_rank = rank;
    assignment.local_world_size = world;
    assignment.coordinator = input.coordinator;

    RankLaunch l;
    l.executable = input.worker_binary;
    l.argv = {input.worker_binary, "train"};
    for (std::string& arg : assignment.ToArgv()) l.argv.push_back(std::move(arg));
    l.env = base_env;
    if (!input.cluster) {
      l.env.emplace_back("CUDA_VISIBLE_DEVICES", cpu ? "" : input.devices[rank]);
      // Device names are NVML indices (PCI bus order); CUDA numbers the fastest GPU first unless
      // told otherwise, which on a mixed machine is another GPU than the one adctld handed out.
      if (!cpu) l.env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
    } else if (cpu) {
      l.env.emplace_back("CUDA_VISIBLE_DEVICES", "");
    }  // a GPU task: Slurm sets CUDA_VISIBLE_DEVICES (--gpus-per-task=1)
    // Each rank holds only its own token. A slurm attempt has one environment for all its
    // tasks: the attempt's key, which each task's shepherd turns into its rank's token.
    if (input.cluster) {
      l.env.emplace_back(kAttemptKeyEnv, Sha256Hex(input.token));
    } else {
      l.env.emplace_back(kWorkerTokenEnv, RankToken(Sha256Hex(input.token), rank));
    }
    if (!input.tls_ca.empty()) l.env.emplace_back("ADCTL_TLS_CA", input.tls_ca);
    l.log_path = layout.rank_log(input.attempt, rank);
    l.exit_path = layout.rank_exit(input.attempt, rank);
    plan.push_back(std::move(l));
  }
  return plan;
}

std::vector<std::string> PlanClusterArgv(const AttemptLaunchInput& input) {
  WorkerAssignment assignment;
  assignment.spec_path = JobLayout(input.job_dir).spec();
  assignment.job_dir = input.job_dir;
  assignment.job_id = input.job_id;
  assignment.attempt = input.attempt;
  assignment.ranks_from = kRanksFromSlurm;
  assignment.coordinator = input.coordinator;
  std::vector<std::string> argv = {input.worker_binary, "train"};
  for (std::string& arg : assignment.ToArgv()) argv.push_back(std::move(arg));
  return argv;
}

}  // namespace adctl
