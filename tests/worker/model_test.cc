// UNet3D against the diffusers reference fixtures (tests/fixtures/diffusers-tiny):
// prediction, loss and every motion-module gradient, loading paths and strict-loading errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "common/motion_export.h"
#include "tests/testing/temp_dir.h"
#include "worker/kernels/dispatch.h"
#include "worker/model/config.h"
#include "worker/model/flops.h"
#include "worker/model/motion_module.h"
#include "worker/model/unet3d.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny";

double RelativeError(const torch::Tensor& out, const torch::Tensor& ref) {
  return ((out - ref).norm() / ref.norm()).item<double>();
}

TensorMap MustRead(const std::string& path) {
  auto t = ReadTensorFile(path);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : TensorMap{};
}

struct ParityResult {
  double pred_error = 0, loss_error = 0, worst_grad_error = 0;
  std::string worst_grad;
  size_t grads = 0;
};

ParityResult RunParity(UNet3D model) {
  auto io = MustRead(kFixtures + "/unet_motion_io.safetensors");
  auto grads = MustRead(kFixtures + "/unet_motion_grads.safetensors");
  model->FreezeAllButMotionModules();
  auto pred = model->forward(io["sample"], io["timesteps"], io["encoder_hidden_states"]);
  auto loss = torch::mse_loss(pred, io["target"]);
  loss.backward();
  ParityResult r;
  r.pred_error = RelativeError(pred.detach(), io["pred"]);
  r.loss_error =
      std::abs(loss.item<double>() - io["loss"].item<double>()) / io["loss"].item<double>();
  auto params = model->MotionParameters();
  r.grads = params.size();
  for (const auto& [name, p] : params) {
    auto it = grads.find(name);
    if (it == grads.end()) {
      ADD_FAILURE() << "reference has no gradient for " << name;
      continue;
    }
    const double e = RelativeError(p.grad(), it->second);
    if (e > r.worst_grad_error) {
      r.worst_grad_error = e;
      r.worst_grad = name;
    }
  }
  EXPECT_EQ(r.grads, grads.size());
  std::cout << "parity: pred rel. error " << r.pred_error << ", loss rel. error " << r.loss_error
            << ", worst of " << r.grads << " gradients " << r.worst_grad_error << " ("
            << r.worst_grad << ")\n";
  return r;
}

// Also with channels-last feature maps (the trainer's layout on CUDA).
TEST(UNet3DParity, Unet2dPlusMotionAdapterMatchesDiffusers) {
  ModelSources src;
  src.unet2d = kFixtures + "/unet2d";
  src.motion_adapter = kFixtures + "/motion_adapter";
  for (const bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "channels-last" : "contiguous");
    auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_TRUE(loaded->model->motion_config().norm_across_frames);
    loaded->model->set_channels_last(channels_last);
    EXPECT_EQ(loaded->model->channels_last(), channels_last);
    auto r = RunParity(loaded->model);
    EXPECT_LT(r.pred_error, 1e-4);
    EXPECT_LT(r.loss_error, 1e-4);
    EXPECT_LT(r.worst_grad_error, 1e-3) << r.worst_grad;
    EXPECT_EQ(r.grads, 286u);
  }
}

TEST(UNet3DParity, CombinedUNetMotionModelMatchesDiffusers) {
  ModelSources src;
  src.unet_motion = kFixtures + "/unet_motion";
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto r = RunParity(loaded->model);
  EXPECT_LT(r.pred_error, 1e-4);
  EXPECT_LT(r.worst_grad_error, 1e-3) << r.worst_grad;
}

TEST(UNet3DParity, GradientCheckpointingGivesTheSameGradients) {
  ModelSources src;
  src.unet2d = kFixtures + "/unet2d";
  src.motion_adapter = kFixtures + "/motion_adapter";
  for (auto granularity : {GradientCheckpointing::kResnets, GradientCheckpointing::kFull}) {
    SCOPED_TRACE(Name(granularity));
    auto loaded = LoadUNet3D(src, MotionNorm::kAuto);  // a fresh model: gradients start at zero
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    loaded->model->set_gradient_checkpointing(granularity);
    auto r = RunParity(loaded->model);
    EXPECT_LT(r.pred_error, 1e-4);
    EXPECT_LT(r.worst_grad_error, 1e-3) << r.worst_grad;
  }
}

// Layers built under DeferredInit have the same names, shapes and options as LibTorch's, on
// the chosen device, and InitializeLinearAndConv gives them LibTorch's distribution; the model
// then trains like one built the usual way.
TEST(DeferredInit, BuildsTheSameModelUninitialisedAndInitialisesItLikeLibTorch) {
  torch::manual_seed(0);
  UNet3D usual(TinyUNetConfig(), TinyMotionConfig(PresetLayout::kV2));
  UNet3D deferred{nullptr};
  {
    DeferredInit scope(torch::kCPU);
    deferred = UNet3D(TinyUNetConfig(), TinyMotionConfig(PresetLayout::kV2));
  }
  auto conv = MakeConv2d(torch::nn::Conv2dOptions(6, 4, 3).padding(1));  // after the scope
  EXPECT_EQ(conv->weight.sizes(), (std::vector<int64_t>{4, 6, 3, 3}));
  InitializeLinearAndConv(*deferred);
  const auto a = usual->named_parameters(), b = deferred->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& item : a) {
    const auto* other = b.find(item.key());
    ASSERT_NE(other, nullptr) << item.key();
    EXPECT_EQ(item.value().sizes(), other->sizes()) << item.key();
    // Same bounds: U(±1/√fan_in) for every weight and bias of a Linear or Conv2d.
    if (item.value().dim() >= 2) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(other->numel() / other->size(0)));
      EXPECT_LE(other->abs().max().item<double>(), bound * (1 + 1e-6)) << item.key();
      EXPECT_GT(other->abs().max().item<double>(), 0.5 * bound) << item.key();
    }
  }
  for (const auto& m : deferred->modules()) {
    if (auto* l = m->as<torch::nn::LinearImpl>()) {
      EXPECT_EQ(l->weight.size(1), l->options.in_features());
      EXPECT_EQ(l->weight.size(0), l->options.out_features());
    }
  }
  deferred->ZeroInitMotionProjOut();
  auto x = torch::randn({2, 4, 4, 8, 8});
  auto t = torch::tensor({10, 500});
  auto text = torch::randn({2, 3, TinyUNetConfig().cross_attention_dim});
  auto out = deferred->forward(x, t, text);
  EXPECT_EQ(out.sizes(), x.sizes());
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

// Without an adapter the motion modules are new: initialised like LibTorch's layers (the
// UNet's own layers come from the file, allocated without initialisation), proj_out zero.
TEST(DeferredInit, NewMotionModulesBesideALoadedUNetAreInitialised) {
  ModelSources src;
  src.unet2d = kFixtures + "/unet2d";
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_FALSE(loaded->motion_loaded);
  int checked = 0;
  for (const auto& item : loaded->model->named_parameters()) {
    const auto& key = item.key();
    const auto& t = item.value();
    if (key.find("motion_modules") == std::string::npos || t.dim() < 2) continue;
    ASSERT_TRUE(torch::isfinite(t).all().item<bool>()) << key;
    const double max = t.abs().max().item<double>();
    if (key.find("proj_out") != std::string::npos) {
      EXPECT_EQ(max, 0) << key;
    } else {
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.numel() / t.size(0)));
      EXPECT_GT(max, 0.5 * bound) << key;
      EXPECT_LE(max, bound * (1 + 1e-6)) << key;
    }
    ++checked;
  }
  EXPECT_GT(checked, 10);
}

TEST(UNet3DParity, PerFrameNormChangesTheOutput) {
  ModelSources src;
  src.unet_motion = kFixtures + "/unet_motion";
  auto loaded = LoadUNet3D(src, MotionNorm::kPerFrame);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_FALSE(loaded->model->motion_config().norm_across_frames);
  auto io = MustRead(kFixtures + "/unet_motion_io.safetensors");
  torch::NoGradGuard no_grad;
  auto pred = loaded->model->forward(io["sample"], io["timesteps"], io["encoder_hidden_states"]);
  EXPECT_GT(RelativeError(pred, io["pred"]), 1e-3);
}

class WeightsTest : public ::testing::Test {
 protected:
  // The reference UNet with its motion adapter (diffusers-tiny).
  static Result<LoadedUNet> LoadReference() {
    ModelSources src;
    src.unet2d = kFixtures + "/unet2d";
    src.motion_adapter = kFixtures + "/motion_adapter";
    return LoadUNet3D(src, MotionNorm::kAuto);
  }

  const TempDir tmp_;
  const fs::path dir_{tmp_.path()};
};

TEST_F(WeightsTest, SaveLoadRoundTripGivesIdenticalTensors) {
  auto a = LoadReference();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(SaveMotionAdapter(*a->model, (dir_ / "adapter").string()).ok());
  ASSERT_TRUE(SaveUNet2D(*a->model, (dir_ / "unet2d").string()).ok());
  // The saved adapter holds exactly the reference adapter's keys and values.
  auto ref = MustRead(kFixtures + "/motion_adapter/diffusion_pytorch_model.safetensors");
  auto ours = MustRead((dir_ / "adapter/diffusion_pytorch_model.safetensors").string());
  ASSERT_EQ(ref.size(), ours.size());
  for (const auto& [k, t] : ref) {
    ASSERT_TRUE(ours.count(k)) << k;
    EXPECT_TRUE(torch::equal(t, ours[k])) << k;
  }
  ModelSources again;
  again.unet2d = (dir_ / "unet2d").string();
  again.motion_adapter = (dir_ / "adapter").string();
  auto b = LoadUNet3D(again, MotionNorm::kAuto);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  auto pa = a->model->named_parameters(true);
  auto pb = b->model->named_parameters(true);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
}

TEST_F(WeightsTest, AnimateDiffKeysMapToDiffusers) {
  EXPECT_EQ(AnimateDiffKeyToDiffusers(
                "module.down_blocks.0.motion_modules.1.temporal_transformer.transformer_blocks.0."
                "attention_blocks.1.to_q.weight"),
            "down_blocks.0.motion_modules.1.transformer_blocks.0.attn2.to_q.weight");
  EXPECT_EQ(AnimateDiffKeyToDiffusers("up_blocks.3.motion_modules.2.temporal_transformer."
                                      "transformer_blocks.0.ff_norm.bias"),
            "up_blocks.3.motion_modules.2.transformer_blocks.0.norm3.bias");
  EXPECT_EQ(AnimateDiffKeyToDiffusers("mid_block.motion_modules.0.temporal_transformer."
                                      "transformer_blocks.0.norms.0.weight"),
            "mid_block.motion_modules.0.transformer_blocks.0.norm1.weight");
  EXPECT_EQ(AnimateDiffKeyToDiffusers("down_blocks.0.motion_modules.0.temporal_transformer."
                                      "transformer_blocks.0.attention_blocks.0.pos_encoder.pe"),
            "");
  EXPECT_EQ(AnimateDiffKeyToDiffusers("down_blocks.0.resnets.0.conv1.weight"), "");
  // A block's one table is its first attention block's copy.
  EXPECT_EQ(
      AnimateDiffTableKeyToDiffusers("down_blocks.0.motion_modules.0.temporal_transformer."
                                     "transformer_blocks.0.attention_blocks.0.pos_encoder.pe"),
      "down_blocks.0.motion_modules.0.transformer_blocks.0.pos_embed.pe");
  EXPECT_EQ(
      AnimateDiffTableKeyToDiffusers("down_blocks.0.motion_modules.0.temporal_transformer."
                                     "transformer_blocks.0.attention_blocks.1.pos_encoder.pe"),
      "");
}

TEST_F(WeightsTest, OriginalAnimateDiffFileLoadsWithPerFrameNorm) {
  // Write the fixture adapter under the original AnimateDiff key names, then load it.
  auto ref = MustRead(kFixtures + "/motion_adapter/diffusion_pytorch_model.safetensors");
  TensorMap original;
  for (const auto& [k, t] : ref) {
    if (k.find("pos_embed.pe") != std::string::npos) continue;
    std::string o = k;
    auto rename = [&o](const std::string& from, const std::string& to) {
      auto p = o.find(from);
      if (p != std::string::npos) o.replace(p, from.size(), to);
    };
    rename(".transformer_blocks.", ".temporal_transformer.transformer_blocks.");
    rename(".norm.", ".temporal_transformer.norm.");
    rename(".proj_in.", ".temporal_transformer.proj_in.");
    rename(".proj_out.", ".temporal_transformer.proj_out.");
    rename(".attn1.", ".attention_blocks.0.");
    rename(".attn2.", ".attention_blocks.1.");
    rename(".norm1.", ".norms.0.");
    rename(".norm2.", ".norms.1.");
    rename(".norm3.", ".ff_norm.");
    original["module." + o] = t;
  }
  const auto file = (dir_ / "mm.safetensors").string();
  ASSERT_TRUE(WriteTensorFile(file, original).ok());
  ModelSources src;
  src.unet2d = kFixtures + "/unet2d";
  src.motion_module_file = file;
  src.motion_adapter = kFixtures + "/motion_adapter";  // config only: 2 heads, 8 groups
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->motion_format, "animatediff");
  EXPECT_FALSE(loaded->model->motion_config().norm_across_frames);
  // With the norm forced to diffusers' scope, the result equals the reference.
  auto forced = LoadUNet3D(src, MotionNorm::kAcrossFrames);
  ASSERT_TRUE(forced.ok());
  auto r = RunParity(forced->model);
  EXPECT_LT(r.pred_error, 1e-4);
}

// model.motion_max_frames stretches the loaded tables; both export formats keep the stretched
// ones, which load back as they are (a released module's sinusoid is computed, not read).
TEST_F(WeightsTest, StretchedPositionTablesRoundTripThroughBothFormats) {
  auto a = LoadReference();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int64_t table = a->model->motion_config().max_seq_length;
  const int64_t frames = table + 8;
  a->model->ExtendMotionPositions(frames);
  EXPECT_EQ(a->model->motion_config().max_seq_length, frames);
  const std::string pe = "down_blocks.0.motion_modules.0.transformer_blocks.0.pos_embed.pe";
  const torch::Tensor stretched = a->model->named_buffers(true)[pe].clone();
  ASSERT_EQ(stretched.size(1), frames);
  {
    // It reads clips of the longer length (more than its table held before).
    torch::NoGradGuard no_grad;
    const auto& cfg = a->model->unet_config();
    auto sample = torch::randn({1, cfg.in_channels, frames, 4, 4});
    auto text = torch::randn({1, 3, cfg.cross_attention_dim});
    auto out = a->model->forward(sample, torch::full({1}, 10, torch::kLong), text);
    EXPECT_EQ(out.sizes(), sample.sizes());
  }
  ASSERT_TRUE(SaveMotionAdapter(*a->model, (dir_ / "adapter").string()).ok());
  ASSERT_TRUE(ExportMotionModules((dir_ / "adapter").string(), ExportFormat::kAnimateDiff,
                                  (dir_ / "mm.safetensors").string(), {})
                  .ok());
  ModelSources diffusers;
  diffusers.unet2d = kFixtures + "/unet2d";
  diffusers.motion_adapter = (dir_ / "adapter").string();
  ModelSources animatediff = diffusers;  // the adapter's config.json gives heads and groups
  animatediff.motion_module_file = (dir_ / "mm.safetensors").string();
  for (const ModelSources& again : {diffusers, animatediff}) {
    auto b = LoadUNet3D(again, MotionNorm::kAuto);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(b->model->motion_config().max_seq_length, frames);
    EXPECT_TRUE(torch::equal(b->model->named_buffers(true)[pe], stretched)) << b->motion_format;
  }
  // A file of the plain sinusoid keeps the computed table (released modules are fp16).
  auto fp16 = MustRead((dir_ / "mm.safetensors").string());
  for (auto& [k, t] : fp16) {
    t = k.find("pos_encoder.pe") != std::string::npos
            ? SinusoidalPositionTable(frames, t.size(2)).to(torch::kHalf)
            : t;
  }
  ASSERT_TRUE(WriteTensorFile((dir_ / "mm.safetensors").string(), fp16).ok());
  auto c = LoadUNet3D(animatediff, MotionNorm::kAuto);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(torch::equal(c->model->named_buffers(true)[pe],
                           SinusoidalPositionTable(frames, stretched.size(2))));
}

TEST_F(WeightsTest, StrictLoadingNamesTheBadKey) {
  auto ref = MustRead(kFixtures + "/motion_adapter/diffusion_pytorch_model.safetensors");
  fs::create_directories(dir_ / "adapter");
  fs::copy_file(kFixtures + "/motion_adapter/config.json", dir_ / "adapter/config.json");
  const auto weights = (dir_ / "adapter/diffusion_pytorch_model.safetensors").string();
  ModelSources src;
  src.unet2d = kFixtures + "/unet2d";
  src.motion_adapter = (dir_ / "adapter").string();

  const std::string key = "down_blocks.1.motion_modules.0.proj_in.weight";
  auto missing = ref;
  missing.erase(key);
  ASSERT_TRUE(WriteTensorFile(weights, missing).ok());
  auto r1 = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("missing tensors: " + key), std::string::npos)
      << r1.status().message();

  auto extra = ref;
  extra["down_blocks.0.motion_modules.7.proj_in.weight"] = torch::zeros({2});
  ASSERT_TRUE(WriteTensorFile(weights, extra).ok());
  auto r2 = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("unexpected tensors: down_blocks.0.motion_modules.7"),
            std::string::npos)
      << r2.status().message();

  auto bad_shape = ref;
  bad_shape[key] = torch::zeros({64, 3});
  ASSERT_TRUE(WriteTensorFile(weights, bad_shape).ok());
  auto r3 = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(
      r3.status().message().find("'" + key + "' has shape [64, 3], the model expects [64, 64]"),
      std::string::npos)
      << r3.status().message();

  // A truncated file is a clear error, not a crash.
  {
    std::ofstream f(weights, std::ios::binary | std::ios::trunc);
    f << "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":";
  }
  auto r4 = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find(weights), std::string::npos) << r4.status().message();
}

TEST(MotionModule, FreshModulesAreTheIdentityAndOnlyProjOutGetsGradients) {
  ModelSources src;
  src.unet2d = kFixtures + "/unet2d";
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->motion_format, "new");
  auto& model = loaded->model;
  model->FreezeAllButMotionModules();
  auto io = MustRead(kFixtures + "/unet_motion_io.safetensors");
  auto pred = model->forward(io["sample"], io["timesteps"], io["encoder_hidden_states"]);
  torch::mse_loss(pred, io["target"]).backward();
  for (const auto& [name, p] : model->MotionParameters()) {
    const bool proj_out = name.find(".proj_out.") != std::string::npos;
    const double g = p.grad().abs().sum().item<double>();
    if (proj_out) {
      EXPECT_GT(g, 0) << name;
    } else {
      EXPECT_EQ(g, 0) << name;
    }
  }
}

// The channels-last paths (the UNet's layout on CUDA): a motion module given a channels-last
// feature map works on its rows ([B, F, H·W, C]: the norms add positions by frame, the attention
// reads each pixel's frames H·W rows apart), a transformer on views of it, and both give the
// values and gradients of the contiguous path, in the input's layout.
TEST(MotionModule, ChannelsLastFeatureMapsGiveTheContiguousResults) {
  torch::manual_seed(21);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  MotionModule mm(32, 4, 8, 24);
  mm->to(torch::kDouble);
  Transformer2D attn(32, 4, 16, 8, /*linear_projection=*/false);
  attn->to(torch::kDouble);
  const int64_t frames = 4;
  auto x = torch::randn({2 * frames, 32, 3, 5}, opts);
  auto text = torch::randn({2, 7, 16}, opts);
  auto dy = torch::randn_like(x);
  auto run = [&](bool channels_last, bool across) {
    auto in =
        (channels_last ? x.contiguous(at::MemoryFormat::ChannelsLast) : x.clone()).requires_grad_();
    auto y = attn(mm(in, frames, across), text, frames);
    EXPECT_EQ(IsChannelsLast(y), channels_last);
    std::vector<torch::Tensor> inputs = {in};
    for (const auto& p : mm->parameters()) inputs.push_back(p);
    auto grads = torch::autograd::grad({y}, inputs, {dy});
    grads.insert(grads.begin(), y);
    return grads;
  };
  for (const bool across : {true, false}) {
    const auto plain = run(false, across), rows = run(true, across);
    ASSERT_EQ(plain.size(), rows.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_LT(RelativeError(rows[i], plain[i]), 1e-12)
          << "output/gradient " << i << " " << across;
    }
  }
}

TEST(MotionModule, PositionTableInterleavesSinAndCos) {
  auto pe = SinusoidalPositionTable(32, 8);
  EXPECT_FLOAT_EQ(pe[0][3][0].item<float>(), std::sin(3.0f));
  EXPECT_FLOAT_EQ(pe[0][3][1].item<float>(), std::cos(3.0f));
  EXPECT_NEAR(pe[0][5][2].item<float>(), std::sin(5.0 * std::exp(-2.0 * std::log(10000.0) / 8)),
              1e-6);
  // Rows do not depend on the table length.
  EXPECT_TRUE(torch::allclose(SinusoidalPositionTable(24, 8), pe.slice(1, 0, 24)));
}

TEST(MotionModule, AStretchedTableKeepsItsEndsAndInterpolatesBetween) {
  const auto pe = SinusoidalPositionTable(32, 8);
  const auto stretched = InterpolatePositionTable(pe, 63);  // position p reads old p / 2
  ASSERT_EQ(stretched.sizes(), (std::vector<int64_t>{1, 63, 8}));
  EXPECT_TRUE(torch::allclose(stretched[0][0], pe[0][0]));
  EXPECT_TRUE(torch::allclose(stretched[0][62], pe[0][31]));
  EXPECT_TRUE(torch::allclose(stretched[0][10], pe[0][5]));
  EXPECT_TRUE(torch::allclose(stretched[0][11], (pe[0][5] + pe[0][6]) / 2, 1e-5, 1e-6));
}

TEST(Timestep, FeaturesFollowTheFormula) {
  auto f = TimestepFeatures(torch::tensor({0, 999}), 8, /*flip_sin_to_cos=*/true, 0);
  // [cos, sin] halves after the flip; t = 0 gives cos 1, sin 0.
  EXPECT_FLOAT_EQ(f[0][0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(f[0][4].item<float>(), 0.0f);
  const double freq1 = std::exp(-std::log(10000.0) * 1 / 4);
  EXPECT_NEAR(f[1][1].item<float>(), std::cos(999 * freq1), 1e-4);
  EXPECT_NEAR(f[1][5].item<float>(), std::sin(999 * freq1), 1e-4);
}

}  // namespace
}  // namespace adctl

namespace adctl {
namespace {

// The FLOP count behind MFU, against the layer-by-layer count of docs/research (AnimateDiff
// spec §7): SD1.5 UNet + v1 motion modules at 16 × 32×32 latents, forward 2043.7 G MACs of
// which the motion modules 602.8 G; v2 adds the mid-block module (612.1 G); training ≈ 9.4
// TFLOP per clip.
TEST(TrainingFlopsTest, Sd15WithMotionModulesMatchesTheLayerByLayerCount) {
  const TrainingFlops v1 =
      CountTrainingFlops(Sd15UNetConfig(), Sd15MotionConfig(PresetLayout::kV1), 16, 32, 32);
  EXPECT_NEAR(v1.forward_macs / 1e9, 2043.7, 0.1);
  EXPECT_NEAR(v1.motion_forward_macs / 1e9, 602.8, 0.1);
  const TrainingFlops v2 =
      CountTrainingFlops(Sd15UNetConfig(), Sd15MotionConfig(PresetLayout::kV2), 16, 32, 32);
  EXPECT_NEAR(v2.motion_forward_macs / 1e9, 612.1, 0.1);
  EXPECT_NEAR(v2.PerClip() / 1e12, 9.4, 0.05);
  // Weight gradients only for the motion modules' linears (not their attention cores).
  EXPECT_LT(v2.backward_weight_macs, v2.motion_forward_macs);
  EXPECT_GT(v2.backward_weight_macs, 0.98 * v2.motion_forward_macs);
  // Doubling the frames doubles the frame-wise work and more than doubles temporal attention.
  const TrainingFlops f32 =
      CountTrainingFlops(Sd15UNetConfig(), Sd15MotionConfig(PresetLayout::kV2), 32, 32, 32);
  EXPECT_GT(f32.PerClip(), 2 * v2.PerClip());
  EXPECT_EQ(DenseBf16PeakFlops("NVIDIA H200"), 989e12);
  EXPECT_EQ(DenseBf16PeakFlops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_EQ(DenseBf16PeakFlops("cpu"), 0);
}

}  // namespace
}  // namespace adctl
