// Running the real adworker binary from a test: spawn it with its stderr in a log file, wait
// for it with a limit (a test must not hang), and read the per-step losses it wrote with
// --metrics-out.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/temp_dir.h"

namespace adctl {

// Starts `args` (argv[0] a path) with stderr written to `log`.
inline pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    FILE* f = std::freopen(log.c_str(), "w", stderr);
    (void)f;
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits at most `limit`; kills the process on timeout (the test must not hang).
inline int WaitFor(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// step -> loss of the `step` events of a metrics file.
inline std::map<int64_t, double> Losses(const std::string& jsonl) {
  std::map<int64_t, double> out;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step") out[j["step"]] = j["loss"];
  }
  return out;
}

#ifdef ADWORKER
// A test that runs adworker jobs in a temporary folder of its own (a TempDir): job
// folders, metrics files and logs side by side, named after the job and rank.
class WorkerRunTest : public ::testing::Test {
 protected:
  // Rank `rank` of `world` of job folder `job`, started; its exit code with Train.
  pid_t Start(const std::string& spec, const std::string& job, int rank, int world,
              const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a = {ADWORKER,        "train",
                                  "--spec",        spec,
                                  "--job-dir",     (root_ / job).string(),
                                  "--rank",        std::to_string(rank),
                                  "--world-size",  std::to_string(world),
                                  "--metrics-out", Metrics(job, rank)};
    a.insert(a.end(), extra.begin(), extra.end());
    return Spawn(a, Log(job, rank));
  }
  int Train(const std::string& spec, const std::string& job, int rank = 0, int world = 1,
            const std::vector<std::string>& extra = {}) {
    return WaitFor(Start(spec, job, rank, world, extra), std::chrono::seconds(240));
  }
  std::string Metrics(const std::string& job, int rank = 0) const {
    return (root_ / (job + "-" + std::to_string(rank) + ".jsonl")).string();
  }
  std::string Log(const std::string& job, int rank = 0) const {
    return (root_ / (job + "-" + std::to_string(rank) + ".log")).string();
  }

  const TempDir tmp_;  // first: removed after everything that uses it
  const std::filesystem::path root_{tmp_.path()};
};
#endif  // ADWORKER

}  // namespace adctl
