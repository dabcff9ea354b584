// Integration-test harness: a real adctld on a temporary directory and free ports, driven by
// the real adctl binary, launching the real adworker. Nothing here is a test double.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/temp_dir.h"

namespace adctl::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// One answer of adctld's HTTP side.
struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
  nlohmann::json json;  // the body parsed (discarded when it is not JSON)
};

class Coordinator {
 public:
  // `cpu_slots` ranks can run at once; a non-empty `token` starts adctld with --token and makes
  // Adctl() and Http() send it.
  explicit Coordinator(int cpu_slots = 2, std::string token = "");
  ~Coordinator();  // stops adctld, cancels what still runs, removes the directory

  void Start();  // waits until adctld answers
  // More adctld flags for the next Start()s.
  void SetExtraArgs(std::vector<std::string> args) { extra_args_ = std::move(args); }
  // "K=V" environment for the commands Run and Adctl start (e.g. ADCTL_TLS_CA=...).
  void SetClientEnv(std::vector<std::string> env) { client_env_ = std::move(env); }
  void Kill9();  // SIGKILL adctld (its ranks keep running)
  // The next Start() listens on new free ports instead of the previous addresses.
  void ForgetAddresses() {
    grpc_.clear();
    http_.clear();
  }
  void Stop();  // SIGTERM adctld

  // Runs `adctl --server <addr> <args>`.
  CommandResult Adctl(const std::vector<std::string>& args) const;
  // Runs `program <args>` to its end, capturing its output.
  CommandResult Run(const std::string& program, const std::vector<std::string>& args) const;
  // `adctl -o json <args>`; fails the test on a non-zero exit.
  nlohmann::json AdctlJson(const std::vector<std::string>& args) const;
  // Writes a spec file under the temp dir and returns its path.
  std::string WriteSpec(const std::string& name, const std::string& yaml) const;
  // Submits and returns the job id.
  std::string Submit(const std::string& spec_path, const std::vector<std::string>& extra = {});
  nlohmann::json Describe(const std::string& id) const;
  // Polls until `pred(job)` holds; fails the test with the last job JSON after `seconds`.
  template <typename Pred>
  nlohmann::json WaitUntil(const std::string& id, Pred pred, double seconds,
                           const std::string& what) const;
  nlohmann::json WaitState(const std::string& id, const std::string& state, double seconds) const;
  std::string HttpGet(const std::string& path) const;
  // `method` GET or POST on the HTTP address, with this coordinator's token when it has one.
  HttpReply Http(const std::string& method, const std::string& path,
                 const std::string& body = "") const;
  // The token Http() sends: this coordinator's, else adctld's owner token (no tokens).
  std::string HttpToken() const;
  // The same with exactly this Authorization header ("": none).
  HttpReply HttpWithAuthorization(const std::string& method, const std::string& path,
                                  const std::string& authorization,
                                  const std::string& body = "") const;

  const std::string& dir() const { return dir_; }
  pid_t pid() const { return pid_; }  // adctld's, while it runs
  const std::string& grpc_address() const { return grpc_; }
  const std::string& http_address() const { return http_; }

 private:
  std::unique_ptr<TempDir> tmp_;  // first: removed after adctld stopped
  std::string dir_;
  int cpu_slots_;
  std::string token_;
  pid_t pid_ = 0;
  std::string grpc_;
  std::string http_;
  std::vector<std::string> extra_args_;
  std::vector<std::string> client_env_;
};

// Paths of the binaries under test (set by CMake).
std::string AdctldPath();
std::string AdctlPath();
std::string AdworkerPath();
// Whether adworker is built (the tests that train skip without it).
bool HaveAdworker();

// A test that trains through a running adctld with `kSlots` CPU slots: skipped without
// adworker.
template <int kSlots>
class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveAdworker()) GTEST_SKIP() << "adworker is not built";
    coordinator_ = std::make_unique<Coordinator>(kSlots);
    coordinator_->Start();
  }
  std::unique_ptr<Coordinator> coordinator_;
};
// The README's tiny job (preset tiny, 16 synthetic clips of 4×8×8, batch 1, a checkpoint every
// 2 steps, the last 2 kept) with `steps` optimizer steps; `resources` is the body of its
// resources mapping ("gpus: 2, max_restarts: 1").
std::string TinyJobSpec(const std::string& name, int steps, const std::string& resources);
// A described job's progress.step and progress.last_checkpoint_step (0 before any).
int64_t Step(const nlohmann::json& job);
int64_t CheckpointStep(const nlohmann::json& job);
// The whole file ("" when it cannot be read).
std::string ReadFile(const std::string& path);
// True when some live (non-zombie) process has this pid or is in this process group.
bool PidAlive(int pid);
bool GroupAlive(int pgid);

template <typename Pred>
nlohmann::json Coordinator::WaitUntil(const std::string& id, Pred pred, double seconds,
                                      const std::string& what) const {
  nlohmann::json job;
  for (int i = 0; i < static_cast<int>(seconds * 10); ++i) {
    job = Describe(id);
    if (pred(job)) return job;
    usleep(100 * 1000);
  }
  ADD_FAILURE() << id << ": timed out after " << seconds << " s waiting for " << what
                << "; last seen: " << job.dump(2);
  return job;
}

}  // namespace adctl::testing
