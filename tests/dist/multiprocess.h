// Multi-process tests: the test binary starts copies of itself as ranks.
//
// A test calls RunRanks("role", world_size, dir, bound); each rank is this same executable,
// started with posix_spawn (no fork of a process that may hold CUDA state) and the environment
// ADCTL_TEST_ROLE=role, RANK, WORLD_SIZE, ADCTL_TEST_DIR=dir. The binary's main() calls
// RunRoleIfChild() first, which runs the function registered for the role (ADCTL_RANK_ROLE)
// instead of the tests and returns its exit code. Ranks still running after `bound` are killed,
// so a hang fails the test instead of blocking it. Each rank's stdout and stderr go to
// dir/rank-<r>.log. Not thread-safe (tests run sequentially).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace adctl::test {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  std::string dir;  // shared by all ranks of one run
};

using RankMain = std::function<int(const RankEnv&)>;

// Registers `main` under `role`; returns true (for static registration).
bool RegisterRankRole(const std::string& role, RankMain main);

// Defines and registers a rank role:  ADCTL_RANK_ROLE(name) { ... return exit_code; }
#define ADCTL_RANK_ROLE(name)                                          \
  static int AdctlRankRole_##name(const ::adctl::test::RankEnv& env);  \
  [[maybe_unused]] static const bool kAdctlRankRoleRegistered_##name = \
      ::adctl::test::RegisterRankRole(#name, &AdctlRankRole_##name);   \
  static int AdctlRankRole_##name([[maybe_unused]] const ::adctl::test::RankEnv& env)

// In a rank process: runs its role and returns the exit code. In the test process: nullopt.
std::optional<int> RunRoleIfChild();

struct RankOutcome {
  int rank = 0;
  int exit_code = -1;  // when it exited normally
  int signal = 0;      // when a signal ended it
  bool killed_at_bound = false;
  double seconds = 0;  // from start to exit
  std::string log;     // its stdout + stderr
};

// Starts `ranks` (all of 0..world_size-1 when empty) and waits for them, at most `bound`.
// `extra_env`: more "NAME=value" entries for every rank.
std::vector<RankOutcome> RunRanks(const std::string& role, int world_size, const std::string& dir,
                                  std::chrono::milliseconds bound, std::vector<int> ranks = {},
                                  const std::vector<std::string>& extra_env = {});

// "rank 0: exit 0 after 1.2 s\n<log>" for each outcome: a test failure message.
std::string Describe(const std::vector<RankOutcome>& outcomes);

// A fresh directory (a TempDir under $TMPDIR, or /tmp), removed when the test program ends.
// `stem` is no longer part of its name.
std::string MakeTempDir(const std::string& stem);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& contents);
// The environment variable, or `fallback` when unset.
std::string GetEnv(const char* name, const std::string& fallback = "");

}  // namespace adctl::test
