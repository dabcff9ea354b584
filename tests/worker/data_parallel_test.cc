// Data-parallel correctness of the real adworker binary on the CPU (Gloo): 2 ranks with batch b
// equal 1 rank with batch 2b — same losses and same motion-module weights after K steps.
// Ranks rendezvous through the directory store under the job directory (no coordinator).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/worker_contract.h"
#include "tests/testing/synthetic_data.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/worker_process.h"
#include "worker/data/latent_dataset.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(root_ / "spec.yaml")
        << "name: dp\nmodel: {preset: tiny}\n"
           "data: {kind: synthetic, num_samples: 32, frames: 4, height: 8, width: 8, text_len: 4}\n"
           "train: {max_steps: 4, batch_size: 2, lr: 1.0e-3, seed: 3}\n"
           "checkpoint: {every_steps: 0, keep_last: 1}\n"
           "resources: {rendezvous_timeout_seconds: 20}\n";
  }

  std::vector<std::string> Args(const std::string& job, int rank, int world,
                                const std::vector<std::string>& extra = {}) {
    std::vector<std::string> a = {
        ADWORKER,        "train",
        "--spec",        (root_ / "spec.yaml").string(),
        "--job-dir",     (root_ / job).string(),
        "--rank",        std::to_string(rank),
        "--world-size",  std::to_string(world),
        "--metrics-out", (root_ / (job + "-" + std::to_string(rank) + ".jsonl")).string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::string Log(const std::string& name) { return (root_ / (name + ".log")).string(); }
  void ExpectTwoRanksEqualOneRank(const std::vector<std::string>& data, size_t steps);

  const TempDir tmp_;  // first: removed after everything that uses it
  const fs::path root_{tmp_.path()};
};

TEST_F(DataParallelTest, TwoRanksEqualOneRankWithTwiceTheBatch) {
  const pid_t one = Spawn(Args("one", 0, 1, {"--set", "train.batch_size=4"}), Log("one"));
  ASSERT_EQ(WaitFor(one, std::chrono::seconds(240)), kExitOk);
  const pid_t r0 = Spawn(Args("two", 0, 2), Log("two-0"));
  const pid_t r1 = Spawn(Args("two", 1, 2), Log("two-1"));
  ASSERT_EQ(WaitFor(r0, std::chrono::seconds(240)), kExitOk);
  ASSERT_EQ(WaitFor(r1, std::chrono::seconds(60)), kExitOk);

  const auto single = Losses((root_ / "one-0.jsonl").string());
  const auto rank0 = Losses((root_ / "two-0.jsonl").string());
  const auto rank1 = Losses((root_ / "two-1.jsonl").string());
  ASSERT_EQ(single.size(), 4u);
  ASSERT_EQ(rank0.size(), 4u);
  for (const auto& [step, loss] : single) {
    EXPECT_NEAR(rank0.at(step), loss, 1e-5 * std::max(1.0, loss)) << "step " << step;
    EXPECT_EQ(rank0.at(step), rank1.at(step)) << "ranks report the same mean loss";
  }
  auto a = ReadTensorFile(
      (root_ / "one/checkpoints/step-00000004/motion_adapter/diffusion_pytorch_model.safetensors")
          .string());
  auto b = ReadTensorFile(
      (root_ / "two/checkpoints/step-00000004/motion_adapter/diffusion_pytorch_model.safetensors")
          .string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  double worst = 0;
  std::string worst_key;
  for (const auto& [k, t] : *a) {
    const double d = (t - b->at(k)).abs().max().item<double>();
    if (d > worst) {
      worst = d;
      worst_key = k;
    }
  }
  // A tenth of one AdamW step (lr 1e-3): Adam's m/√v normalisation magnifies the float rounding
  // of near-zero gradients summed in another order, so bitwise equality is not expected.
  EXPECT_LT(worst, 1e-4) << worst_key;
}

// Two latent caches of synthetic clips, cache-a (12 clips of 4 frames at 8×8) and cache-b
// (`b_clips` of `b_frames`), and the --set arguments that train on them as data.sources with
// each entry's `extra` ("" or ", weight: 1") and `steps` steps.
std::vector<std::string> TwoCaches(const fs::path& root, int64_t b_clips, int64_t b_frames,
                                   const std::string& a_extra, const std::string& b_extra,
                                   int steps) {
  EXPECT_TRUE(
      WriteSyntheticShards(SyntheticClips(12, 4, 8, 8), 4, 32, (root / "cache-a").string(), 4)
          .ok());
  EXPECT_TRUE(WriteSyntheticShards(SyntheticClips(b_clips, b_frames, 8, 8, 9), 4, 32,
                                   (root / "cache-b").string(), 4)
                  .ok());
  return {"--set",
          "data.kind=latents",
          "--set",
          "data.sources=[{path: " + (root / "cache-a").string() + a_extra +
              "}, {path: " + (root / "cache-b").string() + b_extra + "}]",
          "--set",
          "train.max_steps=" + std::to_string(steps)};
}

// Trains `data` (--set arguments) on 1 rank of batch 4 and on 2 ranks of batch 2 and expects
// the same loss at each of the `steps` steps.
void DataParallelTest::ExpectTwoRanksEqualOneRank(const std::vector<std::string>& data,
                                                  size_t steps) {
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), data.begin(), data.end());
    return extra;
  };
  const pid_t one = Spawn(Args("one", 0, 1, with({"--set", "train.batch_size=4"})), Log("one"));
  ASSERT_EQ(WaitFor(one, std::chrono::seconds(240)), kExitOk);
  const pid_t r0 = Spawn(Args("two", 0, 2, with({})), Log("two-0"));
  const pid_t r1 = Spawn(Args("two", 1, 2, with({})), Log("two-1"));
  ASSERT_EQ(WaitFor(r0, std::chrono::seconds(240)), kExitOk);
  ASSERT_EQ(WaitFor(r1, std::chrono::seconds(60)), kExitOk);
  const auto single = Losses((root_ / "one-0.jsonl").string());
  const auto rank0 = Losses((root_ / "two-0.jsonl").string());
  ASSERT_EQ(single.size(), steps);
  ASSERT_EQ(rank0.size(), steps);
  for (const auto& [step, loss] : single) {
    EXPECT_NEAR(rank0.at(step), loss, 1e-5 * std::max(1.0, loss)) << "step " << step;
  }
}

// A weighted mix of caches (data.sources) keeps the rule: each draw depends on its global
// position only, so 2 ranks of batch 2 take exactly the clips 1 rank of batch 4 takes.
TEST_F(DataParallelTest, TwoRanksEqualOneRankOnAWeightedMixOfCaches) {
  ExpectTwoRanksEqualOneRank(TwoCaches(root_, 5, 4, ", weight: 1", ", weight: 3", 4), 4);
}

// Shape buckets (caches of two frame counts): the bucket of each step follows from the
// position, so 2 ranks of batch 2 agree on it without a word and train what 1 rank of batch 4
// trains: 6 steps, into epoch 1 (5 batches an epoch: 3 of 4 frames, 2 of 6).
TEST_F(DataParallelTest, TwoRanksEqualOneRankOverShapeBuckets) {
  ExpectTwoRanksEqualOneRank(TwoCaches(root_, 8, 6, "", "", 6), 6);
}

// SIGTERM before the training loop (here: waiting at the rendezvous for a rank that never
// comes) ends the rank at once with kExitStopped, instead of holding its device for the grace
// period adctld gives a training rank to checkpoint.
TEST_F(DataParallelTest, ARankStoppedDuringStartUpExitsAtOnce) {
  const pid_t r0 = Spawn(Args("startup", 0, 2), Log("startup"));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(r0, SIGTERM), 0);
  EXPECT_EQ(WaitFor(r0, std::chrono::seconds(30)), kExitStopped);
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, std::chrono::seconds(2));
}

TEST_F(DataParallelTest, ARankThatNeverComesFailsTheRendezvousInTime) {
  const auto start = std::chrono::steady_clock::now();
  const pid_t r0 = Spawn(Args("lonely", 0, 2, {"--set", "resources.rendezvous_timeout_seconds=3"}),
                         Log("lonely"));
  EXPECT_EQ(WaitFor(r0, std::chrono::seconds(90)), kExitTransient);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  std::ifstream log(Log("lonely"));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("rendezvous"), std::string::npos) << text;
}

TEST_F(DataParallelTest, ARankDyingMidRunEndsThePeerCleanly) {
  const pid_t r0 = Spawn(
      Args("dies", 0, 2,
           {"--set", "train.max_steps=200", "--set", "resources.rendezvous_timeout_seconds=20"}),
      Log("dies-0"));
  const pid_t r1 = Spawn(Args("dies", 1, 2, {"--set", "train.max_steps=200"}), Log("dies-1"));
  // Wait until rank 1 has trained a few steps, then kill it hard.
  const auto jsonl = root_ / "dies-1.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (Losses(jsonl.string()).size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(Losses(jsonl.string()).size(), 2u);
  kill(r1, SIGKILL);
  WaitFor(r1, std::chrono::seconds(10));
  const int rc = WaitFor(r0, std::chrono::seconds(120));
  EXPECT_TRUE(rc == kExitTransient || rc == kExitCrash) << "rank 0 exit " << rc;
}

TEST_F(DataParallelTest, CheckParityWritesPredictionLossAndGradients) {
  const std::string fixtures = std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny";
  const std::string out = (root_ / "parity.safetensors").string();
  const pid_t pid = Spawn({ADWORKER, "check-parity", "--unet2d", fixtures + "/unet2d",
                           "--motion-adapter", fixtures + "/motion_adapter", "--io",
                           fixtures + "/unet_motion_io.safetensors", "--out", out},
                          Log("parity"));
  ASSERT_EQ(WaitFor(pid, std::chrono::seconds(120)), kExitOk);
  auto got = ReadTensorFile(out);
  auto io = ReadTensorFile(fixtures + "/unet_motion_io.safetensors");
  auto grads = ReadTensorFile(fixtures + "/unet_motion_grads.safetensors");
  ASSERT_TRUE(got.ok() && io.ok() && grads.ok());
  auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
    return ((a - b).norm() / b.norm()).item<double>();
  };
  EXPECT_LT(rel(got->at("pred"), io->at("pred")), 1e-4);
  EXPECT_NEAR(got->at("loss").item<double>(), io->at("loss").item<double>(), 1e-5);
  EXPECT_EQ(got->size(), grads->size() + 2);
  for (const auto& [name, g] : *grads) EXPECT_LT(rel(got->at(name), g), 1e-3) << name;

  // A missing input tensor is a clear error, not a crash.
  ASSERT_TRUE(
      WriteTensorFile((root_ / "bad.safetensors").string(), {{"sample", io->at("sample")}}).ok());
  const pid_t bad = Spawn(
      {ADWORKER, "check-parity", "--unet2d", fixtures + "/unet2d", "--motion-adapter",
       fixtures + "/motion_adapter", "--io", (root_ / "bad.safetensors").string(), "--out", out},
      Log("bad"));
  EXPECT_EQ(WaitFor(bad, std::chrono::seconds(120)), kExitDataError);
  std::ifstream log(Log("bad"));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("missing tensor 'timesteps'"), std::string::npos) << text;
}

}  // namespace
}  // namespace adctl
