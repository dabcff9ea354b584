// Running the real adworker binary from a test: spawn it with its stderr in a log file, wait
// for it with a limit (a test must not hang), and read the per-step losses it wrote with
// --metrics-out.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

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

}  // namespace adctl
