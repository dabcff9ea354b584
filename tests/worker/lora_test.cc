// LoRA on the UNet's attention (worker/model/lora.h) against diffusers/PEFT: the MotionLoRA
// fixture's prediction, loss and every adapter gradient; a fresh adapter changes nothing; a
// written file loads back to the same model; bad adapters are named.
#include "worker/model/lora.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "tests/testing/temp_dir.h"
#include "worker/model/unet3d.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

const std::string kLoraFixtures = std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny";

double LoraRelativeError(const torch::Tensor& out, const torch::Tensor& ref) {
  return ((out - ref).norm() / ref.norm()).item<double>();
}

UNet3D FrozenUNetMotion() {
  ModelSources src;
  src.unet_motion = kLoraFixtures + "/unet_motion";
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (auto& p : loaded->model->parameters()) p.set_requires_grad(false);
  return loaded->model;
}

TensorMap LoraIo() {
  auto io = ReadTensorFile(kLoraFixtures + "/motion_lora_io.safetensors");
  EXPECT_TRUE(io.ok()) << io.status().ToString();
  return io.ok() ? *io : TensorMap{};
}

torch::Tensor Predict(UNet3D& model, TensorMap& io) {
  return model->forward(io["sample"], io["timesteps"], io["encoder_hidden_states"]);
}

// Also with channels-last feature maps (the trainer's layout on CUDA).
TEST(MotionLoraParity, DiffusersLoraFileMatchesPeft) {
  for (const bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "channels-last" : "contiguous");
    UNet3D model = FrozenUNetMotion();
    model->set_channels_last(channels_last);
    auto adapters = LoraAdapters::Load(*model, kLoraFixtures + "/motion_lora.safetensors");
    ASSERT_TRUE(adapters.ok()) << adapters.status().ToString();
    EXPECT_EQ(adapters->size(), 88u);  // attn1/attn2 × to_q, to_k, to_v, to_out.0 × 11 modules
    EXPECT_EQ(adapters->rank(), 4);
    EXPECT_EQ(adapters->alpha(), 2.0);  // from lora_adapter_metadata
    auto io = LoraIo();
    auto pred = Predict(model, io);
    auto loss = torch::mse_loss(pred, io["target"]);
    loss.backward();
    EXPECT_LT(LoraRelativeError(pred.detach(), io["pred"]), 1e-4);
    EXPECT_NEAR(loss.item<double>(), io["loss"].item<double>(), 1e-4 * io["loss"].item<double>());
    double worst = 0;
    std::string worst_name;
    size_t compared = 0;
    for (const auto& [name, p] : adapters->Parameters()) {
      auto ref = io.find("unet." + name);
      ASSERT_NE(ref, io.end()) << "no reference gradient for " << name;
      ASSERT_TRUE(p.grad().defined()) << name;
      const double e = LoraRelativeError(p.grad(), ref->second);
      if (e > worst) worst = e, worst_name = name;
      ++compared;
    }
    EXPECT_EQ(compared, 176u);
    EXPECT_LT(worst, 1e-3) << worst_name;
    // The frozen base learns nothing.
    for (const auto& [name, p] : model->MotionParameters()) {
      EXPECT_FALSE(p.grad().defined()) << name;
    }
    std::cout << "MotionLoRA parity: worst of " << compared << " gradients " << worst << " ("
              << worst_name << ")\n";
  }
}

TEST(MotionLora, AFreshAdapterLeavesTheModelBitForBit) {
  UNet3D model = FrozenUNetMotion();
  auto io = LoraIo();
  torch::NoGradGuard no_grad;
  const auto base = Predict(model, io);
  LoraSpec spec;
  spec.rank = 4;
  spec.alpha = 8;
  auto adapters = LoraAdapters::Attach(*model, spec, /*seed=*/7);
  ASSERT_TRUE(adapters.ok()) << adapters.status().ToString();
  EXPECT_EQ(adapters->size(), 88u);
  EXPECT_TRUE(torch::equal(Predict(model, io), base));
  // A is drawn from the seed alone: the same on every rank.
  UNet3D again = FrozenUNetMotion();
  auto same = LoraAdapters::Attach(*again, spec, 7);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(torch::equal(adapters->Parameters()[0].second, same->Parameters()[0].second));
  EXPECT_GT(adapters->Parameters()[0].second.abs().sum().item<double>(), 0);
}

// A trained adapter written in diffusers' layout (alpha folded into B or kept in the metadata)
// loads back to the same model.
TEST(MotionLora, WrittenFilesLoadBackToTheSameModel) {
  TempDir dir;
  UNet3D model = FrozenUNetMotion();
  auto io = LoraIo();
  LoraSpec spec;
  spec.rank = 2;
  spec.alpha = 6;
  spec.targets = {"to_q", "to_out.0"};
  auto adapters = LoraAdapters::Attach(*model, spec, 1);
  ASSERT_TRUE(adapters.ok()) << adapters.status().ToString();
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : adapters->Parameters()) p.normal_(0, 0.05);  // as after training
  }
  torch::NoGradGuard no_grad;
  const auto trained = Predict(model, io);
  for (const bool fold : {true, false}) {
    SCOPED_TRACE(fold ? "alpha folded into B" : "alpha in the metadata");
    const std::string path = dir.path() + (fold ? "/folded.safetensors" : "/plain.safetensors");
    ASSERT_TRUE(
        WriteTensorFile(path, adapters->DiffusersTensors(fold), adapters->DiffusersMetadata(fold))
            .ok());
    UNet3D fresh = FrozenUNetMotion();
    auto loaded = LoraAdapters::Load(*fresh, path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(loaded->size(), 44u);
    EXPECT_EQ(loaded->targets(), (std::vector<std::string>{"to_q", "to_out.0"}));
    EXPECT_LT(LoraRelativeError(Predict(fresh, io), trained), 1e-6);
  }
}

TEST(MotionLora, BadAdaptersAreNamed) {
  UNet3D model = FrozenUNetMotion();
  LoraSpec spec;
  spec.rank = 4096;
  auto wide = LoraAdapters::Attach(*model, spec, 0);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("model.lora.rank: 4096 is above the width of"),
            std::string::npos)
      << wide.status().message();
  spec.rank = 2;
  spec.targets = {"to_x"};
  auto unknown = LoraAdapters::Attach(*FrozenUNetMotion(), spec, 0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'to_x' is not an attention projection"),
            std::string::npos);
  // A motion module's file is not a LoRA.
  auto not_lora = LoraAdapters::Load(
      *FrozenUNetMotion(), kLoraFixtures + "/motion_adapter/diffusion_pytorch_model.safetensors");
  ASSERT_FALSE(not_lora.ok());
  EXPECT_NE(not_lora.status().message().find("is not a LoRA tensor"), std::string::npos)
      << not_lora.status().message();
}

}  // namespace
}  // namespace adctl
