#include "server/supervisor/launch_plan.h"

#include <gtest/gtest.h>

#include <map>

#include "common/sha256.h"
#include "common/worker_contract.h"

namespace adctl {
namespace {

std::map<std::string, std::string> ToMap(const EnvList& env) {
  std::map<std::string, std::string> m;
  for (const auto& [k, v] : env) {
    EXPECT_TRUE(m.emplace(k, v).second) << k << " set twice";
  }
  return m;
}

AttemptLaunchInput Input(std::vector<std::string> devices) {
  AttemptLaunchInput in;
  in.worker_binary = "/bin/adworker";
  in.coordinator = "127.0.0.1:7000";
  in.job_id = "j1";
  in.job_dir = "/data/jobs/j1";
  in.token = "secret";
  in.attempt = 2;
  in.devices = std::move(devices);
  in.host_slots = 4;
  return in;
}

TEST(LaunchPlanTest, EachRankGetsItsAssignmentOnTheCommandLine) {
  const auto in = Input({"GPU-a", "GPU-b"});
  const auto plan = PlanAttemptLaunch(in, {});
  ASSERT_EQ(plan.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const RankLaunch& l = plan[rank];
    EXPECT_EQ(l.executable, "/bin/adworker");
    ASSERT_GE(l.argv.size(), 2u);
    EXPECT_EQ(l.argv[1], "train");
    // adworker parses exactly what the supervisor wrote.
    auto a = WorkerAssignment::FromArgs({l.argv.begin() + 2, l.argv.end()});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->rank, rank);
    EXPECT_EQ(a->world_size, 2);
    EXPECT_EQ(a->attempt, 2);
    EXPECT_EQ(a->job_id, "j1");
    EXPECT_EQ(a->job_dir, "/data/jobs/j1");
    EXPECT_EQ(a->spec_path, "/data/jobs/j1/spec.yaml");
    EXPECT_EQ(a->coordinator, "127.0.0.1:7000");
    EXPECT_EQ(l.log_path, "/data/jobs/j1/logs/attempt-2/rank-" + std::to_string(rank) + ".log");
    EXPECT_EQ(l.exit_path, "/data/jobs/j1/logs/attempt-2/rank-" + std::to_string(rank) + ".exit");
    auto env = ToMap(l.env);
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], rank == 0 ? "GPU-a" : "GPU-b");
    EXPECT_EQ(env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");  // CUDA's numbering = NVML's
    // Each rank holds its own token, not the attempt's secret.
    EXPECT_EQ(env[kWorkerTokenEnv], RankToken(Sha256Hex(std::string("secret")), rank));
    EXPECT_NE(env[kWorkerTokenEnv], RankToken(Sha256Hex(std::string("secret")), 1 - rank));
    EXPECT_EQ(env.count(kAttemptKeyEnv), 0u);
    EXPECT_EQ(env.count("RANK"), 0u);  // argv, not env, carries the assignment
  }
}

TEST(LaunchPlanTest, BaseEnvironmentDropsRankOwnedVariablesAndAddsDefaults) {
  const auto cpu = Input({"cpu:0", "cpu:1"});
  auto env = ToMap(
      WorkerBaseEnvironment({"PATH=/bin", "RANK=7", "ADCTL_TOKEN=old", "CUDA_VISIBLE_DEVICES=3",
                             "NCCL_NVLS_ENABLE=1", "ADWORKER_METRICS_DIR=/m"},
                            cpu));
  EXPECT_EQ(env["PATH"], "/bin");
  EXPECT_EQ(env["ADWORKER_METRICS_DIR"], "/m");
  EXPECT_EQ(env.count("RANK"), 0u);
  EXPECT_EQ(env.count("ADCTL_TOKEN"), 0u);
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(env["NCCL_NVLS_ENABLE"], "1");  // the operator's choice wins
  EXPECT_EQ(env["TORCH_SYMM_MEM_DISABLE_MULTICAST"], "1");
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 1u);  // CPU ranks split the cores

  auto gpu_env = ToMap(WorkerBaseEnvironment({"PATH=/bin"}, Input({"GPU-a"})));
  EXPECT_EQ(gpu_env.count("OMP_NUM_THREADS"), 0u);
  EXPECT_EQ(ToMap(PlanAttemptLaunch(cpu, {})[1].env)["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(ToMap(PlanAttemptLaunch(cpu, {})[1].env).count("CUDA_DEVICE_ORDER"), 0u);
}

TEST(LaunchPlanTest, ClusterRanksShareOneCommandLineAndTheOperatorsNetworkSettings) {
  AttemptLaunchInput in = Input({"slurm:0", "slurm:1"});
  in.cluster = true;
  in.cluster_gpus = true;
  in.worker_ifname = "ib0";
  in.worker_env = {{"NCCL_IB_HCA", "mlx5"}, {"NCCL_NVLS_ENABLE", "1"}, {"NCCL_DEBUG", "x"}};
  const EnvList base = WorkerBaseEnvironment({"PATH=/usr/bin", "NCCL_DEBUG=WARN"}, in);
  auto env = ToMap(base);  // also: nothing set twice
  EXPECT_EQ(env["NCCL_SOCKET_IFNAME"], "ib0");
  EXPECT_EQ(env["GLOO_SOCKET_IFNAME"], "ib0");
  EXPECT_EQ(env["NCCL_IB_HCA"], "mlx5");
  EXPECT_EQ(env["NCCL_NVLS_ENABLE"], "1");  // the operator's over adctld's default
  EXPECT_EQ(env["NCCL_DEBUG"], "WARN");     // adctld's own environment over --worker-env
  const auto plan = PlanAttemptLaunch(in, base);
  // A GPU task's CUDA_VISIBLE_DEVICES is Slurm's (--gpus-per-task=1).
  EXPECT_EQ(ToMap(plan[0].env).count("CUDA_VISIBLE_DEVICES"), 0u);
  // One environment for every task: the attempt's key, which each task's shepherd turns into
  // its rank's token (never the secret itself).
  EXPECT_EQ(ToMap(plan[0].env)[kAttemptKeyEnv], Sha256Hex(std::string("secret")));
  EXPECT_EQ(ToMap(plan[0].env).count(kWorkerTokenEnv), 0u);

  const std::vector<std::string> argv = PlanClusterArgv(in);
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[0], "/bin/adworker");
  EXPECT_EQ(argv[1], "train");
  const std::map<std::string, std::string> task = {
      {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}};
  auto a = WorkerAssignment::FromArgs({argv.begin() + 2, argv.end()}, [&](const char* name) {
    auto it = task.find(name);
    return it == task.end() ? nullptr : it->second.c_str();
  });
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->rank, 1);
  EXPECT_EQ(a->world_size, 2);
  EXPECT_EQ(a->attempt, 2);
  EXPECT_EQ(a->coordinator, "127.0.0.1:7000");

  // CPU tasks: no GPU, one OpenMP thread per CPU Slurm gives the task.
  in.cluster_gpus = false;
  in.cpus_per_task = 3;
  const EnvList cpu = WorkerBaseEnvironment({}, in);
  EXPECT_EQ(ToMap(cpu)["OMP_NUM_THREADS"], "3");
  EXPECT_EQ(ToMap(PlanAttemptLaunch(in, cpu)[1].env)["CUDA_VISIBLE_DEVICES"], "");
}

}  // namespace
}  // namespace adctl
