// `adctld rank-shepherd`: the shepherd of one Slurm task (shepherd.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/job_layout.h"
#include "common/worker_contract.h"
#include "server/launcher/shepherd.h"

extern char** environ;

namespace adctl {

int RankShepherdMain(int argc, char** argv) {
  const char* usage =
      "usage: adctld rank-shepherd --job-dir DIR --attempt A -- WORKER [ARGS...]\n"
      "  (run by the Slurm launcher's batch script, one per srun task)\n";
  std::string job_dir;
  int attempt = 0;
  int i = 2;  // argv[1] == "rank-shepherd"
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (i + 1 >= argc) break;
    if (arg == "--job-dir") {
      job_dir = argv[++i];
    } else if (arg == "--attempt") {
      attempt = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "adctld rank-shepherd: unknown argument '%s'\n%s", arg.c_str(), usage);
      return 2;
    }
  }
  const char* procid = std::getenv("SLURM_PROCID");
  if (job_dir.empty() || attempt < 1 || i >= argc || procid == nullptr) {
    std::fprintf(stderr, "adctld rank-shepherd: %s\n%s",
                 procid == nullptr ? "SLURM_PROCID is not set (not an srun task)"
                                   : "--job-dir, --attempt and the worker command are required",
                 usage);
    return 2;
  }
  // The task's rank token from the attempt's key: the worker holds only its own.
  if (const char* key = std::getenv(kAttemptKeyEnv); key != nullptr && *key != '\0') {
    setenv(kWorkerTokenEnv, RankToken(key, std::atoi(procid)).c_str(), 1);
    unsetenv(kAttemptKeyEnv);
  }
  const std::string exit_path = JobLayout(job_dir).rank_exit(attempt, std::atoi(procid));
  const std::string exit_tmp = exit_path + ".tmp";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(exit_path).parent_path(), ec);
  std::filesystem::remove(exit_path, ec);
  // The worker command line is the launch plan's (PlanClusterArgv: `--ranks-from slurm`, no
  // rank flags), unchanged: adworker resolves its rank, world size and local rank from the
  // task's environment itself, as it does under a plain `srun adworker train --ranks-from slurm`.
  std::vector<std::string> words(argv + i, argv + argc);
  std::vector<char*> worker_argv;
  for (std::string& w : words) worker_argv.push_back(w.data());
  worker_argv.push_back(nullptr);
  RunShepherd(worker_argv[0], worker_argv.data(), environ, /*log_fd=*/-1, exit_path.c_str(),
              exit_tmp.c_str(), 65536);
}

}  // namespace adctl
