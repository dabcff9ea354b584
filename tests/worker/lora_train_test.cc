// MotionLoRA jobs run by the real adworker binary on the CPU (issue 29): only the adapters
// train and go into checkpoints; two ranks train like one with twice the batch; a stopped run
// resumes exactly; every export format (diffusers-lora, animatediff-lora, merged, fp16 bases
// too) and init_from give back the model the job trained; wrong combinations are named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/checkpoint_dir.h"
#include "common/checkpoint_export.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "common/worker_contract.h"
#include "tests/testing/worker_process.h"
#include "worker/model/lora.h"
#include "worker/model/unet3d.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny";

std::string ReadText(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class LoraTrainingTest : public WorkerRunTest {
 protected:
  // A LoRA job on the tiny UNet2D + MotionAdapter fixture; `model_extra`/`extra` add spec text.
  std::string Spec(const std::string& name, const std::string& model_extra = "",
                   const std::string& extra = "") {
    const fs::path path = root_ / (name + ".yaml");
    std::ofstream(path) << "name: " << name << "\nmodel: {unet2d: " << kTiny
                        << "/unet2d, motion_adapter: " << kTiny << "/motion_adapter"
                        << (model_extra.empty() ? ", lora: {rank: 4, alpha: 8}" : model_extra)
                        << "}\n"
                           "data: {kind: synthetic, num_samples: 32, frames: 4, height: 8, "
                           "width: 8, text_len: 4}\n"
                           "train: {max_steps: 4, batch_size: 2, lr: 1.0e-2, seed: 3}\n"
                           "checkpoint: {every_steps: 2, keep_last: 3}\n"
                           "resources: {rendezvous_timeout_seconds: 20}\n"
                        << extra;
    return path.string();
  }

  fs::path Checkpoint(const std::string& job, int step) {
    return root_ / job / "checkpoints" / CheckpointDirName(step);
  }
  fs::path LoraFile(const std::string& job, int step) {
    return Checkpoint(job, step) / kLoraCheckpointDir / kLoraFileName;
  }
};

// The frozen fixture model the LoRA jobs adapt (motion modules from `motion`: the fixture's
// MotionAdapter folder, or a file or folder given), with the jobs' GroupNorm scope (the spec's
// default, per frame; kAuto: what `motion` records).
UNet3D BaseModel(const std::string& motion = kTiny + "/motion_adapter",
                 MotionNorm norm = MotionNorm::kPerFrame) {
  ModelSources src;
  src.unet2d = kTiny + "/unet2d";
  // A file takes its configuration (heads, groups) from the fixture's folder beside it.
  src.motion_adapter = fs::is_directory(motion) ? motion : kTiny + "/motion_adapter";
  if (!fs::is_directory(motion)) src.motion_module_file = motion;
  auto loaded = LoadUNet3D(src, norm);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (auto& p : loaded->model->parameters()) p.set_requires_grad(false);
  loaded->model->eval();
  return loaded->model;
}

// The model's prediction on a fixed input.
torch::Tensor Predict(UNet3D& model) {
  torch::manual_seed(11);
  const auto& c = model->unet_config();
  auto sample = torch::randn({1, c.in_channels, 4, 8, 8});
  auto text = torch::randn({1, 4, c.cross_attention_dim});
  torch::NoGradGuard no_grad;
  return model->forward(sample, torch::tensor({500}), text);
}

// The prediction of the base with the LoRA file `path` (either layout) loaded.
torch::Tensor PredictWithLora(const std::string& path) {
  UNet3D model = BaseModel();
  auto adapters = LoraAdapters::Load(*model, path);
  EXPECT_TRUE(adapters.ok()) << adapters.status().ToString();
  return Predict(model);
}

double RelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).norm() / b.norm()).item<double>();
}

TEST_F(LoraTrainingTest, OnlyTheAdaptersTrainAndCheckpointsHoldThemAlone) {
  ASSERT_EQ(Train(Spec("job"), "job"), kExitOk) << ReadText(Log("job"));
  EXPECT_FALSE(fs::exists(Checkpoint("job", 4) / "motion_adapter"));
  auto file = SafetensorsFile::Open(LoraFile("job", 4).string());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->tensors().size(), 176u);  // 88 projections × (A, B)
  const auto& meta = (*file)->metadata();
  EXPECT_EQ(meta.at(kLoraMetaRank), "4");
  EXPECT_EQ(meta.at(kLoraMetaAlpha), "8");
  EXPECT_EQ(meta.at(kLoraMetaTargets), "to_q,to_k,to_v,to_out.0");
  EXPECT_EQ(meta.at(kLoraMetaBase), kTiny + "/motion_adapter");
  EXPECT_EQ(meta.at(kLoraMetaBaseSha256),
            *Sha256File(kTiny + "/motion_adapter/diffusion_pytorch_model.safetensors"));
  EXPECT_EQ(meta.at("adctl_step"), "4");

  // B started at zero and trained; the optimizer state is the adapters' alone.
  auto lora = ReadTensorFile(LoraFile("job", 4).string());
  ASSERT_TRUE(lora.ok());
  double b_norm = 0;
  for (const auto& [k, t] : *lora) {
    if (k.find("lora_B") != std::string::npos) b_norm += t.norm().item<double>();
  }
  EXPECT_GT(b_norm, 0);
  auto optimizer = ReadTensorFile((Checkpoint("job", 4) / "optimizer.safetensors").string());
  ASSERT_TRUE(optimizer.ok());
  EXPECT_EQ(optimizer->size(), 2 * 176u + 1);
  for (const auto& [k, t] : *optimizer) {
    EXPECT_TRUE(k == "step" || k.find(".lora_A.weight") != std::string::npos ||
                k.find(".lora_B.weight") != std::string::npos)
        << k;
  }
  // The job's log says what trains.
  EXPECT_NE(ReadText(Log("job")).find("trainable parameters; the base motion module"),
            std::string::npos);
}

TEST_F(LoraTrainingTest, TwoRanksEqualOneRankWithTwiceTheBatch) {
  const std::string spec = Spec("dp");
  ASSERT_EQ(Train(spec, "one", 0, 1, {"--set", "train.batch_size=4"}), kExitOk)
      << ReadText(Log("one"));
  const pid_t r0 = Start(spec, "two", 0, 2);
  const pid_t r1 = Start(spec, "two", 1, 2);
  ASSERT_EQ(WaitFor(r0, std::chrono::seconds(240)), kExitOk) << ReadText(Log("two", 0));
  ASSERT_EQ(WaitFor(r1, std::chrono::seconds(60)), kExitOk) << ReadText(Log("two", 1));
  const auto single = Losses(Metrics("one"));
  const auto pair = Losses(Metrics("two"));
  ASSERT_EQ(single.size(), 4u);
  for (const auto& [step, loss] : single) {
    EXPECT_NEAR(pair.at(step), loss, 1e-5 * std::max(1.0, loss)) << "step " << step;
  }
  auto a = ReadTensorFile(LoraFile("one", 4).string());
  auto b = ReadTensorFile(LoraFile("two", 4).string());
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& [k, t] : *a) {
    // A tenth of one AdamW step (lr 1e-2), as the full-module test allows.
    EXPECT_LT((t - b->at(k)).abs().max().item<double>(), 1e-3) << k;
  }
}

TEST_F(LoraTrainingTest, AStoppedRunResumesExactly) {
  const std::string spec = Spec("resume");
  ASSERT_EQ(Train(spec, "straight"), kExitOk) << ReadText(Log("straight"));
  ASSERT_EQ(Train(spec, "split", 0, 1, {"--set", "train.max_steps=2"}), kExitOk);
  ASSERT_EQ(Train(spec, "split"), kExitOk) << ReadText(Log("split"));
  EXPECT_NE(ReadText(Log("split")).find("resumed from"), std::string::npos);
  const auto straight = Losses(Metrics("straight"));
  const auto resumed = Losses(Metrics("split"));
  ASSERT_EQ(resumed.count(4), 1u);
  EXPECT_NEAR(resumed.at(3), straight.at(3), 1e-6);
  EXPECT_NEAR(resumed.at(4), straight.at(4), 1e-6);
  auto a = ReadTensorFile(LoraFile("straight", 4).string());
  auto b = ReadTensorFile(LoraFile("split", 4).string());
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& [k, t] : *a) EXPECT_TRUE(torch::allclose(t, b->at(k), 0, 1e-6)) << k;
}

// Every export, and a job continued from one (init_from, lr ~0), compute the model the job
// trained: the diffusers file with alpha folded into B, AnimateDiff's layout, and the base with
// the LoRA merged in (both layouts); a full-module format is refused, naming the LoRA ones.
TEST_F(LoraTrainingTest, ExportsAndInitFromGiveBackTheTrainedModel) {
  ASSERT_EQ(
      Train(Spec("job", "", "export: {formats: [diffusers-lora, animatediff-lora, merged]}\n"),
            "job"),
      kExitOk)
      << ReadText(Log("job"));
  const fs::path exports = root_ / "job" / "export" / CheckpointDirName(4);
  const auto trained = PredictWithLora(LoraFile("job", 4).string());
  UNet3D base_model = BaseModel();
  const auto base = Predict(base_model);
  ASSERT_GT(RelativeError(trained, base), 1e-4) << "the LoRA changed nothing";

  const std::string diffusers = (exports / "lora_diffusers" / kLoraFileName).string();
  const std::string animatediff = (exports / "motion_lora.safetensors").string();
  EXPECT_LT(RelativeError(PredictWithLora(diffusers), trained), 1e-5);
  EXPECT_LT(RelativeError(PredictWithLora(animatediff), trained), 1e-5);
  auto file = SafetensorsFile::Open(animatediff);
  ASSERT_TRUE(file.ok());
  EXPECT_NE((*file)->Find("down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks."
                          "0.attention_blocks.0.processor.to_q_lora.down.weight"),
            nullptr);
  // Loaders that ignore the metadata take alpha = rank: the folded B keeps the model.
  file = SafetensorsFile::Open(diffusers);
  ASSERT_TRUE(file.ok());
  EXPECT_NE((*file)->metadata().at(kDiffusersLoraMetadataKey).find("\"unet.lora_alpha\":4.0"),
            std::string::npos)
      << (*file)->metadata().at(kDiffusersLoraMetadataKey);

  // Each records the scope it was trained with (kAuto reads it).
  UNet3D merged_diffusers =
      BaseModel((exports / "merged" / "motion_adapter").string(), MotionNorm::kAuto);
  UNet3D merged_animatediff =
      BaseModel((exports / "merged" / "motion_module.safetensors").string(), MotionNorm::kAuto);
  EXPECT_LT(RelativeError(Predict(merged_diffusers), trained), 1e-5);
  EXPECT_LT(RelativeError(Predict(merged_animatediff), trained), 1e-5);

  auto refused = ExportCheckpoint(Checkpoint("job", 4).string(), ExportFormat::kDiffusers,
                                  (root_ / "refused").string());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'diffusers-lora'"), std::string::npos)
      << refused.status().ToString();

  for (const std::string& from : {diffusers, animatediff}) {
    SCOPED_TRACE(from);
    const std::string job = from == diffusers ? "from-diffusers" : "from-animatediff";
    const std::string spec = Spec(job, ", lora: {rank: 4, init_from: " + from + "}");
    ASSERT_EQ(Train(spec, job, 0, 1, {"--set", "train.lr=1.0e-30", "--set", "train.max_steps=1"}),
              kExitOk)
        << ReadText(Log(job));
    EXPECT_LT(RelativeError(PredictWithLora(LoraFile(job, 1).string()), trained), 1e-5);
  }
}

// An fp16 AnimateDiff-layout base (as mm_sd_v15_v2 ships): the merge is W + scale·B·A rounded
// to fp16 once, the tensors without an adapter are the base's bytes.
TEST_F(LoraTrainingTest, MergedExportOfAnFp16BaseRoundsOnce) {
  auto adapter = ReadTensorFile(kTiny + "/motion_adapter/diffusion_pytorch_model.safetensors");
  ASSERT_TRUE(adapter.ok());
  TensorMap half;
  for (const auto& [k, t] : *adapter) {
    for (const auto& name : DiffusersKeyToAnimateDiff(k)) half[name] = t.to(torch::kHalf);
  }
  const std::string base = (root_ / "mm_fp16.safetensors").string();
  ASSERT_TRUE(WriteTensorFile(base, half).ok());
  const std::string spec =
      Spec("fp16", ", motion_module_file: " + base + ", lora: {rank: 4, alpha: 8}",
           "export: {formats: [merged]}\n");
  ASSERT_EQ(Train(spec, "fp16", 0, 1, {"--set", "train.max_steps=2"}), kExitOk)
      << ReadText(Log("fp16"));
  auto merged = ReadTensorFile(
      (root_ / "fp16" / "export" / CheckpointDirName(2) / "merged" / "motion_module.safetensors")
          .string());
  auto lora = ReadTensorFile(LoraFile("fp16", 2).string());
  ASSERT_TRUE(merged.ok() && lora.ok());
  int checked = 0;
  for (const auto& [k, t] : half) {
    ASSERT_EQ(merged->count(k), 1u) << k;
    const auto& m = merged->at(k);
    EXPECT_EQ(m.scalar_type(), torch::kHalf) << k;
    const std::string module = AnimateDiffKeyToDiffusers(k);
    const std::string a_key = "unet." + module.substr(0, module.size() - 7) + ".lora_A.weight";
    if (module.size() > 7 && lora->count(a_key)) {
      const auto& a = lora->at(a_key);
      const auto& b = lora->at("unet." + module.substr(0, module.size() - 7) + ".lora_B.weight");
      const auto expected = (t.to(torch::kFloat) + 2.0 * torch::matmul(b, a)).to(torch::kHalf);
      // One rounding to fp16: at most one unit in the last place apart.
      const auto diff = (m.to(torch::kFloat) - expected.to(torch::kFloat)).abs();
      const auto ulp = expected.to(torch::kFloat).abs() * std::pow(2.0, -10) + 6e-8;
      EXPECT_TRUE(torch::all(diff <= ulp).item().toBool()) << k;
      ++checked;
    } else {
      EXPECT_TRUE(torch::equal(m, t)) << k;
    }
  }
  EXPECT_EQ(checked, 88);
}

TEST_F(LoraTrainingTest, WrongCombinationsAreNamed) {
  // init_from of another rank than the spec's.
  ASSERT_EQ(Train(Spec("job"), "job", 0, 1, {"--set", "train.max_steps=2"}), kExitOk);
  const std::string rank8 =
      Spec("rank8", ", lora: {rank: 8, init_from: " + LoraFile("job", 2).string() + "}");
  EXPECT_EQ(Train(rank8, "rank8"), kExitBadSpec);
  EXPECT_NE(ReadText(Log("rank8")).find("has rank 4, model.lora.rank says 8"), std::string::npos)
      << ReadText(Log("rank8"));
  // A full-module job's checkpoints do not resume as a LoRA, nor the reverse.
  const std::string full = Spec("full", " ");
  ASSERT_EQ(Train(full, "full", 0, 1, {"--set", "train.max_steps=2"}), kExitOk)
      << ReadText(Log("full"));
  EXPECT_EQ(Train(Spec("lora-on-full"), "full"), kExitModelError);
  EXPECT_NE(ReadText(Log("full")).find("holds whole motion modules, and this job trains a LoRA"),
            std::string::npos)
      << ReadText(Log("full"));
  EXPECT_EQ(Train(full, "job"), kExitModelError);
  EXPECT_NE(ReadText(Log("job")).find("holds a LoRA (lora/)"), std::string::npos);
}

}  // namespace
}  // namespace adctl
