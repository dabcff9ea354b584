// The training engine on a GPU (label gpu; skipped without one): fp32 parity with the
// diffusers fixtures on CUDA, and bf16 training of the tiny preset with checkpoints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "common/checkpoint_dir.h"
#include "common/fs_util.h"
#include "common/job_spec.h"
#include "common/worker_contract.h"
#include "worker/model/weights.h"
#include "worker/train/trainer.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

// ADCTL_FIXTURES_DIR in the environment overrides the build's tests/fixtures.
const std::string kFixtures =
    std::string(std::getenv("ADCTL_FIXTURES_DIR") ? std::getenv("ADCTL_FIXTURES_DIR")
                                                  : ADCTL_FIXTURES_DIR) +
    "/diffusers-tiny";

double RelativeError(const torch::Tensor& out, const torch::Tensor& ref) {
  return ((out.cpu() - ref).norm() / ref.norm()).item<double>();
}

class EngineGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(EngineGpuTest, Fp32ParityWithDiffusersOnCuda) {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  ModelSources src;
  src.unet2d = kFixtures + "/unet2d";
  src.motion_adapter = kFixtures + "/motion_adapter";
  auto loaded = LoadUNet3D(src, "auto");
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto model = loaded->model;
  model->to(torch::kCUDA);
  model->FreezeAllButMotionModules();
  auto io = ReadTensorFile(kFixtures + "/unet_motion_io.safetensors");
  auto grads = ReadTensorFile(kFixtures + "/unet_motion_grads.safetensors");
  ASSERT_TRUE(io.ok() && grads.ok());
  auto& t = *io;
  auto pred =
      model->forward(t["sample"].cuda(), t["timesteps"].cuda(), t["encoder_hidden_states"].cuda());
  auto loss = torch::mse_loss(pred, t["target"].cuda());
  loss.backward();
  EXPECT_LT(RelativeError(pred.detach(), t["pred"]), 1e-4);
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, p] : model->MotionParameters()) {
    const double e = RelativeError(p.grad(), grads->at(name));
    if (e > worst) {
      worst = e;
      worst_name = name;
    }
  }
  EXPECT_LT(worst, 1e-3) << worst_name;
}

class RecordingReporter : public Reporter {
 public:
  void OnTrainingStarted(int64_t, int64_t) override {}
  void OnStep(const StepReport& r) override { steps.push_back(r); }
  void OnCheckpoint(const CheckpointReport&) override {}
  void OnEvent(EventLevel, const std::string& m) override { events.push_back(m); }
  bool StopRequested() override { return false; }
  std::vector<StepReport> steps;
  std::vector<std::string> events;
};

// bf16 training of the tiny preset with each attention-kernel choice (train.attention): losses
// finite, peak memory reported, checkpoints committed, verified and pruned by retention.
class Bf16TinyTraining : public EngineGpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(Bf16TinyTraining, TrainsAndCheckpoints) {
  const auto dir =
      fs::temp_directory_path() / ("adctl-gpu-" + GetParam() + "-" + std::to_string(::getpid()));
  auto spec = ParseJobSpec(
      "name: g\nmodel: {preset: tiny}\n"
      "data: {kind: synthetic, num_samples: 32, frames: 8, height: 16, width: 16, text_len: 4}\n"
      "train: {max_steps: 8, batch_size: 4, lr: 1.0e-3, precision: bf16, attention: " +
      GetParam() +
      "}\n"
      "checkpoint: {every_steps: 2, keep_last: 2}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  RecordingReporter rep;
  TrainerOptions o;
  o.spec = *spec;
  o.job_dir = dir.string();
  o.reporter = &rep;
  ASSERT_EQ(RunTrainer(o), kExitOk) << (rep.events.empty() ? "" : rep.events.back());
  ASSERT_EQ(rep.steps.size(), 8u);
  for (const auto& s : rep.steps) {
    EXPECT_TRUE(std::isfinite(s.loss));
    EXPECT_GT(s.peak_memory_bytes, 0);
  }
  // Checkpoints at steps 2, 4, 6, 8; retention deleted 2 and 4.
  auto list = ListCheckpoints((dir / "checkpoints").string());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ(list->front().step, 6);
  EXPECT_EQ(list->back().step, 8);
  EXPECT_TRUE(VerifyCheckpoint(list->back().path).ok());
  // Not std::filesystem::remove_all: see common/fs_util.h.
  EXPECT_TRUE(RemoveTree(dir.string()).ok());
}

INSTANTIATE_TEST_SUITE_P(AttentionKernels, Bf16TinyTraining,
                         ::testing::Values("auto", "flash", "efficient", "cudnn", "math"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace adctl
