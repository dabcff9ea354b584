// Sampling, the optimizer over several steps, and the inference-tool exports against the
// references (fixtures/diffusers-tiny: AnimateDiffPipeline with DDIM, torch.optim.AdamW +
// clip_grad_norm_ + diffusers' constant_with_warmup, and the original AnimateDiff key names).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/motion_export.h"
#include "common/safetensors.h"
#include "tests/testing/temp_dir.h"
#include "worker/model/weights.h"
#include "worker/sample/validation.h"
#include "worker/tools/parity.h"
#include "worker/train/optimizer.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
const std::string kTiny = std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny";

double RelativeError(const torch::Tensor& out, const torch::Tensor& ref) {
  return ((out.to(torch::kDouble) - ref.to(torch::kDouble)).norm() /
          ref.to(torch::kDouble).norm().clamp_min(1e-30))
      .item<double>();
}

UNet3D LoadTinyUNetMotion() {
  ModelSources src;
  src.unet_motion = kTiny + "/unet_motion";
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  loaded->model->FreezeAllButMotionModules();
  return loaded->model;
}

TEST(Sampler, DdimWithGuidanceMatchesAnimateDiffPipeline) {
  auto unet = LoadTinyUNetMotion();
  auto vae = LoadAutoencoderKL(kTiny + "/vae");
  ASSERT_TRUE(vae.ok()) << vae.status().ToString();
  auto io = ReadTensorFile(kTiny + "/sampling_io.safetensors");
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  std::ifstream readme(kTiny + "/README.json");
  const auto settings = nlohmann::json::parse(readme).at("sampling");
  auto out = RunSamplingParity(*unet, **vae, *io, settings);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (const std::string run : {"alpha1", "alpha0"}) {
    SCOPED_TRACE(run);
    EXPECT_TRUE(torch::equal(out->at(run + ".timesteps"), io->at(run + ".timesteps")))
        << out->at(run + ".timesteps");
    EXPECT_LT(RelativeError(out->at(run + ".latents"), io->at(run + ".latents")), 1e-4);
    EXPECT_LT(RelativeError(out->at(run + ".video"), io->at(run + ".video")), 1e-4);
    EXPECT_EQ(out->at(run + ".video").sizes(), io->at(run + ".video").sizes());
  }
  // The two settings differ only in the last step, and visibly so.
  EXPECT_GT(RelativeError(io->at("alpha1.latents"), io->at("alpha0.latents")), 1e-3);
}

TEST(Optimizer, ThreeAdamWStepsWithWarmupMatchPyTorch) {
  auto io = ReadTensorFile(kTiny + "/unet_motion_io.safetensors");
  ASSERT_TRUE(io.ok());
  auto ref = ReadTensorFile(kTiny + "/adamw3_io.safetensors");
  ASSERT_TRUE(ref.ok());
  // Gradients zeroed in place between steps, or released (the trainer's single-rank way).
  for (const bool release : {false, true}) {
    SCOPED_TRACE(release ? "gradients released" : "gradients zeroed");
    auto unet = LoadTinyUNetMotion();
    AdamWParityOptions o;  // the fixture's: lr 1e-3, warm-up 2, clip 1.0, weight decay 1e-2
    o.release_grads = release;
    auto out = RunAdamWSteps(*unet, *io, o);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    for (int n = 0; n < 3; ++n) {
      const std::string s = std::to_string(n);
      SCOPED_TRACE("step " + s);
      EXPECT_NEAR(out->at("lr." + s).item<double>(), ref->at("lr." + s).item<double>(), 1e-15);
      EXPECT_LT(RelativeError(out->at("loss." + s), ref->at("loss." + s)), 1e-5);
      EXPECT_LT(RelativeError(out->at("grad_norm." + s), ref->at("grad_norm." + s)), 1e-5);
    }
    EXPECT_EQ(out->at("lr.0").item<double>(), 0.0);  // diffusers' warm-up starts at 0
    int params = 0;
    for (const auto& [name, t] : *ref) {
      if (name.rfind("param.", 0) != 0) continue;
      ASSERT_TRUE(out->count(name)) << name;
      EXPECT_LT(RelativeError(out->at(name), t), 1e-5) << name;
      ++params;
    }
    EXPECT_EQ(params, static_cast<int>(unet->MotionParameters().size()));
    if (release) {
      for (const auto& [name, p] : unet->MotionParameters()) {
        EXPECT_FALSE(p.grad().defined()) << name;
      }
    }
  }
}

TEST(Optimizer, CosineScheduleFollowsDiffusers) {
  TrainSpec t;
  t.lr = 1.0;
  t.warmup_steps = 4;
  t.max_steps = 14;
  t.lr_schedule = LrSchedule::kCosine;
  EXPECT_EQ(LearningRate(t, 0), 0.0);
  EXPECT_DOUBLE_EQ(LearningRate(t, 2), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(t, 4), 1.0);
  EXPECT_NEAR(LearningRate(t, 9), 0.5, 1e-12);  // half-way through the decay
  EXPECT_NEAR(LearningRate(t, 14), 0.0, 1e-12);
}

class ExportTest : public ::testing::Test {
 protected:
  const TempDir tmp_;
  const fs::path dir_{tmp_.path()};
};

TEST_F(ExportTest, AnimateDiffFileRoundTripsToIdenticalTensors) {
  auto unet = LoadTinyUNetMotion();
  unet->set_norm_across_frames(false);  // trained per frame: the default for new jobs
  const auto adapter = (dir_ / "ckpt" / "motion_adapter").string();
  ASSERT_TRUE(SaveMotionAdapter(*unet, adapter).ok());

  const auto file = (dir_ / "out" / "motion_module.safetensors").string();
  auto info = ExportMotionModules(adapter, ExportFormat::kAnimateDiff, file, {{"adctl_step", "7"}});
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->motion_norm, "per_frame");

  // The original names, pos_encoder.pe in both attention blocks, the scope in the metadata.
  auto opened = SafetensorsFile::Open(file);
  ASSERT_TRUE(opened.ok());
  const auto& f = **opened;
  EXPECT_EQ(f.metadata().at("motion_norm"), "per_frame");
  EXPECT_EQ(f.metadata().at("adctl_step"), "7");
  for (const char* key :
       {"down_blocks.0.motion_modules.0.temporal_transformer.norm.weight",
        "down_blocks.0.motion_modules.0.temporal_transformer.proj_in.weight",
        "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0."
        "attention_blocks.0.to_q.weight",
        "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0."
        "attention_blocks.1.to_out.0.bias",
        "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0."
        "attention_blocks.0.pos_encoder.pe",
        "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0."
        "attention_blocks.1.pos_encoder.pe",
        "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0.norms.1.weight",
        "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0.ff_norm.bias",
        "mid_block.motion_modules.0.temporal_transformer.proj_out.weight"}) {
    EXPECT_NE(f.Find(key), nullptr) << key;
  }
  for (const auto& t : f.tensors()) {
    EXPECT_EQ(t.name.find(".attn1."), std::string::npos) << t.name;
    EXPECT_EQ(t.name.find("pos_embed"), std::string::npos) << t.name;
  }

  // Loaded back through the AnimateDiff-file path: every motion tensor identical, and "auto"
  // takes the recorded per-frame scope.
  ModelSources src;
  src.unet2d = kTiny + "/unet2d";
  src.motion_adapter = kTiny + "/motion_adapter";  // the architecture
  src.motion_module_file = file;
  auto back = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->model->motion_config().norm_across_frames);
  auto original = unet->MotionParameters();
  auto loaded = back->model->MotionParameters();
  ASSERT_EQ(original.size(), loaded.size());
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_EQ(original[i].first, loaded[i].first);
    EXPECT_TRUE(torch::equal(original[i].second, loaded[i].second)) << original[i].first;
  }
  auto raw = ReadMotionModuleFile(file);
  ASSERT_TRUE(raw.ok());
  EXPECT_TRUE(torch::equal(
      raw->at("down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0."
              "attention_blocks.1.pos_encoder.pe"),
      unet->named_buffers(
          true)["down_blocks.0.motion_modules.0.transformer_blocks.0.pos_embed.pe"]));
}

TEST_F(ExportTest, DiffusersFolderRecordsTheScopeAndLoads) {
  auto unet = LoadTinyUNetMotion();  // diffusers' scope: across frames
  const auto adapter = (dir_ / "ckpt" / "motion_adapter").string();
  ASSERT_TRUE(SaveMotionAdapter(*unet, adapter).ok());
  const auto out = (dir_ / "out" / "motion_adapter").string();
  auto info = ExportMotionModules(adapter, ExportFormat::kDiffusers, out);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->motion_norm, "across_frames");
  auto recorded = RecordedMotionNorm(out + "/config.json");
  ASSERT_TRUE(recorded.ok());
  EXPECT_EQ(*recorded, "across_frames");
  // Exporting again replaces the folder.
  ASSERT_TRUE(ExportMotionModules(adapter, ExportFormat::kDiffusers, out).ok());
  ModelSources src;
  src.unet2d = kTiny + "/unet2d";
  src.motion_adapter = out;
  auto back = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->model->motion_config().norm_across_frames);
  // "per_frame" overrides what the folder records.
  auto forced = LoadUNet3D(src, MotionNorm::kPerFrame);
  ASSERT_TRUE(forced.ok());
  EXPECT_FALSE(forced->model->motion_config().norm_across_frames);
}

TEST_F(ExportTest, BadSourcesNameTheProblem) {
  auto missing = ExportMotionModules((dir_ / "nothing").string(), ExportFormat::kAnimateDiff,
                                     (dir_ / "x.safetensors").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no config.json"), std::string::npos);
  // A UNet folder is not a MotionAdapter: its tensors are named.
  auto unet2d = ExportMotionModules(kTiny + "/unet2d", ExportFormat::kAnimateDiff,
                                    (dir_ / "y.safetensors").string());
  ASSERT_FALSE(unet2d.ok());
  EXPECT_NE(unet2d.status().message().find("not a motion-module tensor"), std::string::npos)
      << unet2d.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ / "y.safetensors"));
  EXPECT_FALSE(ParseExportFormat("comfyui").ok());
}

TEST(MotionKeys, MapsBothWays) {
  const std::string diffusers =
      "up_blocks.1.motion_modules.2.transformer_blocks.0.attn2.to_v.weight";
  const auto original = DiffusersKeyToAnimateDiff(diffusers);
  ASSERT_EQ(original.size(), 1u);
  EXPECT_EQ(original[0],
            "up_blocks.1.motion_modules.2.temporal_transformer.transformer_blocks.0."
            "attention_blocks.1.to_v.weight");
  EXPECT_EQ(AnimateDiffKeyToDiffusers(original[0]), diffusers);
  EXPECT_EQ(AnimateDiffKeyToDiffusers("module." + original[0]), diffusers);
  EXPECT_EQ(DiffusersKeyToAnimateDiff("down_blocks.0.resnets.0.conv1.weight").size(), 0u);
  EXPECT_EQ(
      DiffusersKeyToAnimateDiff("mid_block.motion_modules.0.transformer_blocks.0.pos_embed.pe")
          .size(),
      2u);
}

TEST(Validation, RendersAtEveryStepsAndTheExtraSteps) {
  ValidationSpec v;
  v.prompts = {"a cat"};
  v.every_steps = 5000;
  v.at_steps = {2, 50};
  for (int64_t s : {2, 50, 5000, 10000}) EXPECT_TRUE(ValidationDue(v, s)) << s;
  for (int64_t s : {1, 3, 49, 4999}) EXPECT_FALSE(ValidationDue(v, s)) << s;
  v.prompts.clear();
  EXPECT_FALSE(ValidationDue(v, 2));
}

}  // namespace
}  // namespace adctl
