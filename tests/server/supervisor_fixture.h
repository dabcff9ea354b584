// The supervisor with real processes and a shell-script stand-in for adworker
// (fake_worker.sh, whose behaviour the spec's name picks): the fixture of supervisor_test.cc and
// queue_notify_test.cc.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "server/launcher/process.h"
#include "server/supervisor/supervisor.h"
#include "tests/testing/temp_store.h"

namespace adctl {

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenTestStore(tmp_);
    StartSupervisor(2);
  }
  void TearDown() override {
    supervisor_.reset();
    store_.reset();
  }
  // More options for a test's supervisor (webhooks), before it starts.
  virtual void Customize(SupervisorOptions*) {}
  void StartSupervisor(int slots) {
    SupervisorOptions o;
    o.data_dir = dir_;
    o.worker_binary = ADCTL_FAKE_WORKER;
    o.coordinator_address = "127.0.0.1:1";
    o.devices = CpuSlots(slots);
    o.tick_ms = 20;
    o.restart_backoff_seconds = 0.05;
    Customize(&o);
    supervisor_ = std::make_unique<Supervisor>(o, store_.get(), Launchers{&launcher_}, nullptr);
    ASSERT_TRUE(supervisor_->Start().ok());
  }
  std::string Spec(const std::string& name, int gpus, int max_restarts = 0, double grace = 5,
                   int grad_accum = 1) {
    return "name: " + name +
           "\nmodel: {preset: tiny}\ndata: {kind: synthetic}\ntrain: {max_steps: 4, grad_accum: " +
           std::to_string(grad_accum) + "}\nresources: {gpus: " + std::to_string(gpus) +
           ", max_restarts: " + std::to_string(max_restarts) +
           ", grace_seconds: " + std::to_string(grace) + "}\n";
  }
  std::string Submit(const std::string& yaml, const std::string& submission_id = "") {
    SubmitRequest r;
    r.spec_yaml = yaml;
    r.submission_id = submission_id;
    auto job = supervisor_->jobs().Submit(r);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? job->first.id : "";
  }
  JobRecord WaitFor(const std::string& id, JobState state, double seconds = 10) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      auto job = store_->GetJob(id);
      if (job.ok() && job->state == state) return job.value();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    auto job = store_->GetJob(id);
    ADD_FAILURE() << id << " did not reach " << JobStateName(state) << "; it is "
                  << JobStateName(job->state) << ": " << job->message;
    return job.value();
  }
  bool NoProcessLeft(const std::string& id) {
    auto job = store_->GetJob(id);
    for (int attempt = 1; attempt <= job->attempt; ++attempt) {
      for (const RankRecord& r : store_->ListRanks(id, attempt).value()) {
        if (ProcessGroupExists(r.pgid)) return false;
      }
    }
    return true;
  }

  TempDir tmp_;  // first: removed after everything that uses it
  const std::string dir_ = tmp_.path();
  std::unique_ptr<Store> store_;
  LocalLauncher launcher_;
  std::unique_ptr<Supervisor> supervisor_;
};

}  // namespace adctl
