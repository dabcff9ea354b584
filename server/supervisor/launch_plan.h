// The launch plan of one attempt: argv, environment, log and exit files for each rank, built
// from the worker contract (common/worker_contract.h: WorkerAssignment) and the job directory
// layout (common/job_layout.h). A pure function of its input and the inherited environment.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/launcher/launcher.h"

namespace adctl {

using EnvList = std::vector<std::pair<std::string, std::string>>;

struct AttemptLaunchInput {
  std::string worker_binary;
  std::string coordinator;  // adctld's WorkerService address
  std::string job_id;
  std::string job_dir;
  std::string token;  // the job's secret: the only adctl value passed through the environment
  int attempt = 1;
  std::vector<std::string> devices;  // one per rank: "gpu:UUID"-style CUDA ids or "cpu:N"
  size_t host_slots = 1;             // every device slot of this host (the OMP thread split)
  std::string tls_ca;  // PEM the ranks verify adctld's TLS certificate with ("" : plaintext)
  // A cluster launcher (slurm) runs the ranks: it sets CUDA_VISIBLE_DEVICES per task itself
  // (GPU clusters), or the ranks are CPU tasks (cluster_gpus false) with `cpus_per_task`
  // OpenMP threads (0: 1).
  bool cluster = false;
  bool cluster_gpus = true;
  int cpus_per_task = 0;
  // --worker-ifname (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME) and --worker-env K=V: added to
  // every rank's environment unless adctld's own environment sets the variable.
  std::string worker_ifname;
  std::vector<std::pair<std::string, std::string>> worker_env;
};

// The environment every rank inherits: `inherited` ("K=V" strings, e.g. adctld's environ) minus
// the variables a rank owns (ADCTL_*, RANK, WORLD_SIZE, CUDA_VISIBLE_DEVICES, ...), plus the NCCL
// multicast safety defaults and, for CPU ranks, OMP_NUM_THREADS, unless the operator set them.
EnvList WorkerBaseEnvironment(const std::vector<std::string>& inherited,
                              const AttemptLaunchInput& input);

// One RankLaunch per device, rank = index.
std::vector<RankLaunch> PlanAttemptLaunch(const AttemptLaunchInput& input, const EnvList& base_env);
// The one command line of every task of a cluster attempt: rank 0's, with `--ranks-from slurm`
// in place of the rank flags (argv[0] included).
std::vector<std::string> PlanClusterArgv(const AttemptLaunchInput& input);

}  // namespace adctl
