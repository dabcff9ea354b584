// `adctld rank-shepherd`: the shepherd of one Slurm task (shepherd.h).
#include <unistd.h>

#include <algorithm>
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
  const std::string exit_path = JobLayout(job_dir).rank_exit(attempt, std::atoi(procid));
  const std::string exit_tmp = exit_path + ".tmp";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(exit_path).parent_path(), ec);
  std::filesystem::remove(exit_path, ec);
  // `WORKER train --ranks-from slurm ...`: the shepherd resolves the ranks from its task's
  // environment with the worker's own parser (WorkerAssignment) and hands the worker explicit
  // rank flags, so any adworker runs under it (adworker also reads --ranks-from slurm itself,
  // for `srun adworker train --ranks-from slurm` without adctld).
  std::vector<std::string> words(argv + i, argv + argc);
  if (words.size() > 2 && std::find(words.begin(), words.end(), "--ranks-from") != words.end()) {
    auto assignment =
        WorkerAssignment::FromArgs(std::vector<std::string>(words.begin() + 2, words.end()));
    if (!assignment.ok()) {
      std::fprintf(stderr, "adctld rank-shepherd: %s\n", assignment.status().ToString().c_str());
      return 2;
    }
    assignment->ranks_from.clear();
    words.resize(2);
    for (std::string& w : assignment->ToArgv()) words.push_back(std::move(w));
  }
  std::vector<char*> worker_argv;
  for (std::string& w : words) worker_argv.push_back(w.data());
  worker_argv.push_back(nullptr);
  RunShepherd(worker_argv[0], worker_argv.data(), environ, /*log_fd=*/-1, exit_path.c_str(),
              exit_tmp.c_str(), 65536);
}

}  // namespace adctl
