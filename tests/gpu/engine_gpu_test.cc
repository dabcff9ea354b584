// The training engine on a GPU (label gpu; skipped without one): fp32 parity with the
// diffusers fixtures on CUDA, and bf16 training of the tiny preset with checkpoints.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "common/checkpoint_dir.h"
#include "common/job_spec.h"
#include "common/worker_contract.h"
#include "tests/testing/synthetic_data.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/latent_dataset.h"
#include "worker/model/lora.h"
#include "worker/model/weights.h"
#include "worker/train/checkpoint_saver.h"
#include "worker/train/ema.h"
#include "worker/train/optimizer.h"
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
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
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

// MotionLoRA on CUDA in fp32 (the fused short-attention path with the adapters' terms): the
// PEFT fixture's prediction and every adapter gradient, as on the CPU.
TEST_F(EngineGpuTest, MotionLoraParityOnCuda) {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  ModelSources src;
  src.unet_motion = kFixtures + "/unet_motion";
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto model = loaded->model;
  model->to(torch::kCUDA);
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  auto adapters = LoraAdapters::Load(*model, kFixtures + "/motion_lora.safetensors");
  ASSERT_TRUE(adapters.ok()) << adapters.status().ToString();
  auto io = ReadTensorFile(kFixtures + "/motion_lora_io.safetensors");
  ASSERT_TRUE(io.ok());
  auto& t = *io;
  auto pred =
      model->forward(t["sample"].cuda(), t["timesteps"].cuda(), t["encoder_hidden_states"].cuda());
  torch::mse_loss(pred, t["target"].cuda()).backward();
  EXPECT_LT(RelativeError(pred.detach(), t["pred"]), 1e-4);
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, p] : adapters->Parameters()) {
    const double e = RelativeError(p.grad(), t.at("unet." + name));
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

// Trains the tiny preset (or `model`) in `job_dir` with the spec after `name: g` and
// `model: {preset: tiny}`; the exit code, with what was reported in `rep`.
int TrainTiny(const std::string& spec_rest, const fs::path& job_dir, RecordingReporter& rep,
              const std::string& model = "{preset: tiny}") {
  auto spec = ParseJobSpec("name: g\nmodel: " + model + "\n" + spec_rest);
  if (!spec.ok()) {
    rep.events.push_back(spec.status().ToString());
    return kExitBadSpec;
  }
  TrainerOptions o;
  o.spec = *spec;
  o.job_dir = job_dir.string();
  o.reporter = &rep;
  return RunTrainer(o);
}

// bf16 training of the tiny preset with each attention-kernel choice (train.attention): losses
// finite, peak memory reported, checkpoints committed, verified and pruned by retention.
class Bf16TinyTraining : public EngineGpuTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(Bf16TinyTraining, TrainsAndCheckpoints) {
  const TempDir tmp;
  const fs::path dir = fs::path(tmp.path()) / "job";
  RecordingReporter rep;
  ASSERT_EQ(
      TrainTiny("data: {kind: synthetic, num_samples: 32, frames: 8, height: 16, width: 16, "
                "text_len: 4}\n"
                "train: {max_steps: 8, batch_size: 4, lr: 1.0e-3, precision: bf16, attention: " +
                    GetParam() +
                    "}\n"
                    "checkpoint: {every_steps: 2, keep_last: 2}\n",
                dir, rep),
      kExitOk)
      << (rep.events.empty() ? "" : rep.events.back());
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
}

INSTANTIATE_TEST_SUITE_P(AttentionKernels, Bf16TinyTraining,
                         ::testing::Values("auto", "flash", "efficient", "cudnn", "math"),
                         [](const auto& info) { return info.param; });

// model.motion_max_frames on CUDA: 48-frame clips through the tiny preset's stretched 32-position
// tables, in bf16 with the fused kernels (the motion modules' attention past the short-attention
// kernel's 32 frames runs LibTorch's).
TEST_F(EngineGpuTest, StretchedPositionTablesTrainLongerClipsInBf16) {
  const TempDir tmp;
  RecordingReporter rep;
  ASSERT_EQ(TrainTiny("data: {kind: synthetic, num_samples: 8, frames: 48, height: 8, width: 8, "
                      "text_len: 4}\n"
                      "train: {max_steps: 4, batch_size: 2, lr: 1.0e-3, precision: bf16}\n"
                      "checkpoint: {every_steps: 4}\n",
                      fs::path(tmp.path()) / "job", rep, "{preset: tiny, motion_max_frames: 48}"),
            kExitOk)
      << (rep.events.empty() ? "" : rep.events.back());
  ASSERT_EQ(rep.steps.size(), 4u);
  for (const auto& s : rep.steps) EXPECT_TRUE(std::isfinite(s.loss));
}

// at::_fused_adamw_ (one kernel) against the multi-tensor formula it replaces: the same
// parameters and moments after three steps with weight decay, to fp32 rounding.
TEST_F(EngineGpuTest, FusedAdamWMatchesTheForeachFormula) {
  torch::manual_seed(0);
  TrainSpec spec;
  spec.weight_decay = 0.01;
  std::vector<torch::Tensor> initial = {torch::randn({320, 640}), torch::randn({640}),
                                        torch::randn({3, 5, 7})};
  std::vector<std::vector<torch::Tensor>> grads;
  for (int s = 0; s < 3; ++s) {
    grads.emplace_back();
    for (const auto& t : initial) grads.back().push_back(torch::randn_like(t).cuda());
  }
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> params(2);
  for (int which = 0; which < 2; ++which) {
    for (size_t i = 0; i < initial.size(); ++i) {
      params[which].emplace_back("p" + std::to_string(i),
                                 initial[i].cuda().set_requires_grad(true));
    }
  }
  AdamW fused(params[0], spec, /*allow_fused=*/true), plain(params[1], spec, false);
  ASSERT_TRUE(fused.fused());
  ASSERT_FALSE(plain.fused());
  for (int s = 0; s < 3; ++s) {
    for (int which = 0; which < 2; ++which) {
      for (size_t i = 0; i < initial.size(); ++i) {
        params[which][i].second.mutable_grad().copy_(grads[s][i]);
      }
    }
    fused.Step(1e-3 * (s + 1));
    plain.Step(1e-3 * (s + 1));
  }
  for (size_t i = 0; i < initial.size(); ++i) {
    EXPECT_LT(RelativeError(params[0][i].second.detach(), params[1][i].second.detach().cpu()), 1e-6)
        << i;
  }
  // The fused kernel rounds β2 to fp32 before taking 1 − β2 (0.999f gives 1 − β2 = 0.00099998713,
  // 1.29e-5 below 0.001): the second moments differ by that much, the first ones by rounding.
  const TensorMap a = fused.StateDict(), b = plain.StateDict();
  for (const auto& [name, t] : a) {
    if (name == "step") continue;
    EXPECT_LT(RelativeError(t, b.at(name).cpu()), 2e-5) << name;
  }
}

// train.ema on the GPU (one _foreach_lerp_ an update) and in host memory (device: cpu) against
// diffusers' EMAModel (tests/fixtures/ema/).
TEST_F(EngineGpuTest, EmaOnTheGpuAndInHostMemoryMatchesDiffusers) {
  const std::string fixture = kFixtures + "/../ema/ema5_reference.safetensors";
  auto ref = ReadTensorFile(fixture);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  for (const EmaDevice device : {EmaDevice::kGpu, EmaDevice::kCpu}) {
    SCOPED_TRACE(Name(device));
    EmaSpec spec;
    spec.decay = 0.9999;  // the fixture's "warmup" setting
    spec.device = device;
    Ema::NamedTensors params;
    for (const auto& [key, t] : *ref) {
      if (key.rfind("init.", 0) == 0) params.emplace_back(key.substr(5), t.cuda());
    }
    Ema ema(spec, params);
    EXPECT_EQ(ema.averages()[0].second.is_cuda(), device == EmaDevice::kGpu);
    for (int k = 1; k <= 5; ++k) {
      for (auto& [name, p] : params) p.copy_(ref->at("weights." + std::to_string(k) + "." + name));
      ema.Update();  // on a side stream: the next copy_ into the weights waits for it below
      ema.Sync();
    }
    for (const auto& [name, avg] : ema.averages()) {
      EXPECT_LT(RelativeError(avg.cpu(), ref->at("ema.warmup." + name)), 1e-6) << name;
    }
    {
      Ema::Applied applied(&ema);
      EXPECT_TRUE(torch::equal(params[0].second.cpu(), ema.averages()[0].second.cpu()));
    }
  }
}

// A checkpoint of GPU tensors (copied to pinned memory without waiting per tensor) holds them
// as they were at Start, although the device changes them right after.
TEST_F(EngineGpuTest, BackgroundCheckpointOfGpuTensorsIsTheStateAtStart) {
  const TempDir tmp;  // first: removed after the saver
  const fs::path dir = fs::path(tmp.path()) / "checkpoints";
  auto weight = torch::randn({4096, 1024}, torch::kCUDA);
  const auto expected = weight.cpu();
  CheckpointSaver saver(dir.string(), RetentionPolicy::KeepLast(1));
  CheckpointState state;
  state.step = 1;
  state.motion_adapter = {{"down_blocks.0.motion_modules.0.proj_out.weight", weight}};
  state.motion_adapter_config = "{}";
  state.optimizer = {{"exp_avg.w", weight}, {"step", torch::tensor({1}, torch::kLong)}};
  saver.Reserve(state);
  saver.Start(state);
  weight.mul_(3);  // the next step, queued right after the copies
  auto saved = saver.Wait();
  ASSERT_TRUE(saved && saved->status.ok()) << (saved ? saved->status.ToString() : "no result");
  auto read = ReadTensorFile(saved->path + "/optimizer.safetensors");
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(torch::equal(read->at("exp_avg.w"), expected));
}

// train.cuda_graphs: the captured and replayed step trains as the eager one does (same seed,
// same batches: the same loss curve to bf16 rounding) and says it captured.
TEST_F(EngineGpuTest, CudaGraphStepsTrainLikeEagerSteps) {
  std::map<bool, std::vector<double>> losses;
  for (bool graphs : {false, true}) {
    const TempDir tmp;  // a fresh one for each run
    const fs::path dir = fs::path(tmp.path()) / "job";
    RecordingReporter rep;
    ASSERT_EQ(TrainTiny("data: {kind: synthetic, num_samples: 32, frames: 8, height: 16, "
                        "width: 16, text_len: 4}\n"
                        "train: {max_steps: 8, batch_size: 2, grad_accum: 2, lr: 1.0e-3, "
                        "precision: bf16, cuda_graphs: " +
                            std::string(graphs ? "true" : "false") +
                            "}\n"
                            "checkpoint: {enabled: false}\n",
                        dir, rep),
              kExitOk)
        << (rep.events.empty() ? "" : rep.events.back());
    for (const auto& s : rep.steps) losses[graphs].push_back(s.loss);
    bool captured = false;
    for (const auto& e : rep.events) captured = captured || e.find("captured") != std::string::npos;
    EXPECT_EQ(captured, graphs);
  }
  ASSERT_EQ(losses[true].size(), 8u);
  ASSERT_EQ(losses[false].size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(losses[true][i], losses[false][i], 2e-2 * std::abs(losses[false][i]))
        << "step " << i + 1;
  }
}

// Shape buckets with train.cuda_graphs: one graph per bucket shape, each captured after its own
// warm-up, replayed as its bucket comes up; the loss curve is the eager one's (bf16 rounding).
TEST_F(EngineGpuTest, CudaGraphsCaptureEveryShapeBucket) {
  const TempDir tmp;
  const fs::path root(tmp.path());
  ASSERT_TRUE(
      WriteSyntheticShards(SyntheticClips(16, 8, 16, 16), 4, 32, (root / "square").string(), 8)
          .ok());
  ASSERT_TRUE(
      WriteSyntheticShards(SyntheticClips(16, 12, 16, 24, 3), 4, 32, (root / "wide").string(), 8)
          .ok());
  std::map<bool, std::vector<double>> losses;
  for (bool graphs : {false, true}) {
    RecordingReporter rep;
    const std::string spec =
        "data: {kind: latents, sources: [{path: " + (root / "square").string() +
        "}, {path: " + (root / "wide").string() +
        "}]}\n"
        "train: {max_steps: 12, batch_size: 2, lr: 1.0e-3, precision: bf16, "
        "cuda_graphs: " +
        std::string(graphs ? "true" : "false") +
        "}\n"
        "checkpoint: {enabled: false}\n";
    ASSERT_EQ(TrainTiny(spec, root / (graphs ? "graphs" : "eager"), rep), kExitOk)
        << (rep.events.empty() ? "" : rep.events.back());
    for (const auto& s : rep.steps) losses[graphs].push_back(s.loss);
    int captured = 0;
    for (const auto& e : rep.events)
      captured += e.find("captured as a CUDA graph") != std::string::npos;
    EXPECT_EQ(captured, graphs ? 2 : 0);
  }
  ASSERT_EQ(losses[true].size(), 12u);
  ASSERT_EQ(losses[false].size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(losses[true][i], losses[false][i], 2e-2 * std::abs(losses[false][i]))
        << "step " << i + 1;
  }
}

// A MotionLoRA job in bf16 on the GPU with the fused kernels, eager and as a CUDA graph: the
// adapters train (the same loss curve both ways, to bf16 rounding), the frozen motion modules in
// bf16 too, and the checkpoint holds the LoRA alone.
TEST_F(EngineGpuTest, MotionLoraTrainsInBf16WithCudaGraphs) {
  std::map<bool, std::vector<double>> losses;
  for (bool graphs : {false, true}) {
    const TempDir tmp;  // a fresh one for each run
    const fs::path dir = fs::path(tmp.path()) / "job";
    RecordingReporter rep;
    ASSERT_EQ(TrainTiny("data: {kind: synthetic, num_samples: 32, frames: 8, height: 16, "
                        "width: 16, text_len: 4}\n"
                        "train: {max_steps: 6, batch_size: 2, lr: 1.0e-2, precision: bf16, "
                        "cuda_graphs: " +
                            std::string(graphs ? "true" : "false") +
                            "}\n"
                            "checkpoint: {every_steps: 6, keep_last: 1}\n"
                            "export: {formats: [animatediff-lora]}\n",
                        dir, rep,
                        "{unet2d: " + kFixtures + "/unet2d, motion_adapter: " + kFixtures +
                            "/motion_adapter, lora: {rank: 4, alpha: 4}}"),
              kExitOk)
        << (rep.events.empty() ? "" : rep.events.back());
    for (const auto& s : rep.steps) losses[graphs].push_back(s.loss);
    bool captured = false;
    for (const auto& e : rep.events) captured = captured || e.find("captured") != std::string::npos;
    EXPECT_EQ(captured, graphs);
    const fs::path ckpt = dir / "checkpoints" / CheckpointDirName(6);
    EXPECT_FALSE(fs::exists(ckpt / "motion_adapter"));
    auto lora = ReadTensorFile((ckpt / "lora" / "pytorch_lora_weights.safetensors").string());
    ASSERT_TRUE(lora.ok()) << lora.status().ToString();
    double b_norm = 0;
    for (const auto& [k, t] : *lora) {
      if (k.find("lora_B") != std::string::npos) b_norm += t.norm().item<double>();
    }
    EXPECT_GT(b_norm, 0);
    EXPECT_TRUE(fs::exists(dir / "export" / CheckpointDirName(6) / "motion_lora.safetensors"));
  }
  ASSERT_EQ(losses[true].size(), 6u);
  ASSERT_EQ(losses[false].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(losses[true][i], losses[false][i], 2e-2 * std::abs(losses[false][i]))
        << "step " << i + 1;
  }
}

}  // namespace
}  // namespace adctl
