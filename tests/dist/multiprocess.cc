#include "tests/dist/multiprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/testing/temp_dir.h"

extern char** environ;

namespace adctl::test {
namespace {

std::map<std::string, RankMain>& Roles() {
  static auto* roles = new std::map<std::string, RankMain>();
  return *roles;
}

std::string SelfExecutable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  path[n] = '\0';
  return path;
}

bool IsRankVariable(const char* entry) {
  for (const char* name : {"ADCTL_TEST_ROLE=", "RANK=", "WORLD_SIZE=", "ADCTL_TEST_DIR="}) {
    if (std::strncmp(entry, name, std::strlen(name)) == 0) return true;
  }
  return false;
}

}  // namespace

bool RegisterRankRole(const std::string& role, RankMain main) {
  Roles()[role] = std::move(main);
  return true;
}

std::string GetEnv(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : fallback;
}

std::optional<int> RunRoleIfChild() {
  const std::string role = GetEnv("ADCTL_TEST_ROLE");
  if (role.empty()) return std::nullopt;
  auto it = Roles().find(role);
  if (it == Roles().end()) {
    std::fprintf(stderr, "no rank role '%s' in this test binary\n", role.c_str());
    return 99;
  }
  RankEnv env;
  env.rank = std::atoi(GetEnv("RANK", "0").c_str());
  env.world_size = std::atoi(GetEnv("WORLD_SIZE", "1").c_str());
  env.dir = GetEnv("ADCTL_TEST_DIR", ".");
  try {
    return it->second(env);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d role %s: uncaught exception: %s\n", env.rank, role.c_str(),
                 e.what());
    return 98;
  }
}

std::vector<RankOutcome> RunRanks(const std::string& role, int world_size, const std::string& dir,
                                  std::chrono::milliseconds bound, std::vector<int> ranks,
                                  const std::vector<std::string>& extra_env) {
  if (ranks.empty()) {
    for (int r = 0; r < world_size; ++r) ranks.push_back(r);
  }
  const std::string exe = SelfExecutable();
  const auto start = std::chrono::steady_clock::now();
  std::vector<RankOutcome> outcomes;
  std::vector<pid_t> pids;
  for (int rank : ranks) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      if (!IsRankVariable(*e)) env_strings.emplace_back(*e);
    }
    env_strings.push_back("ADCTL_TEST_ROLE=" + role);
    env_strings.push_back("RANK=" + std::to_string(rank));
    env_strings.push_back("WORLD_SIZE=" + std::to_string(world_size));
    env_strings.push_back("ADCTL_TEST_DIR=" + dir);
    env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string arg0 = exe;
    char* argv[] = {arg0.data(), nullptr};

    const std::string log = dir + "/rank-" + std::to_string(rank) + ".log";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    pid_t pid = -1;
    const int error = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0) throw std::runtime_error("posix_spawn: " + std::string(std::strerror(error)));
    pids.push_back(pid);
    RankOutcome outcome;
    outcome.rank = rank;
    outcomes.push_back(outcome);
  }

  size_t running = pids.size();
  std::vector<bool> done(pids.size(), false);
  while (running > 0) {
    const auto now = std::chrono::steady_clock::now();
    const bool past_bound = now - start > bound;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      if (past_bound) {
        ::kill(pids[i], SIGKILL);
        outcomes[i].killed_at_bound = true;
      }
      int status = 0;
      const pid_t got = ::waitpid(pids[i], &status, past_bound ? 0 : WNOHANG);
      if (got != pids[i]) continue;
      done[i] = true;
      --running;
      outcomes[i].seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (WIFEXITED(status)) outcomes[i].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) outcomes[i].signal = WTERMSIG(status);
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (RankOutcome& outcome : outcomes) {
    outcome.log = ReadFile(dir + "/rank-" + std::to_string(outcome.rank) + ".log");
  }
  return outcomes;
}

std::string Describe(const std::vector<RankOutcome>& outcomes) {
  std::ostringstream out;
  for (const RankOutcome& o : outcomes) {
    out << "rank " << o.rank << ": ";
    if (o.killed_at_bound) out << "KILLED AT THE TIME BOUND, ";
    if (o.signal) {
      out << "signal " << o.signal;
    } else {
      out << "exit " << o.exit_code;
    }
    out << " after " << o.seconds << " s\n" << o.log << "\n";
  }
  return out.str();
}

std::string MakeTempDir(const std::string& /*stem*/) {
  // Kept until the test program ends (its ranks have ended by then: RunRanks waits for them); a
  // rank process makes none, so its exit removes nothing of the test's.
  static std::vector<std::unique_ptr<TempDir>> dirs;
  std::string error;
  std::unique_ptr<TempDir> dir = TempDir::TryMake(::testing::TempDir(), &error);
  if (dir == nullptr) throw std::runtime_error(error);
  dirs.push_back(std::move(dir));
  return dirs.back()->path();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
}

}  // namespace adctl::test
