// The GPU memory estimate of `adctl submit --dry-run` (common/memory_estimate.h): within 15 % of
// the allocator peaks measured at the reference shape, parameter counts read from the weights
// files' headers, and the terms moving with what moves them.
#include "common/memory_estimate.h"

#include <gtest/gtest.h>

#include <string>

namespace adctl {
namespace {

const std::string kTiny = std::string(ADCTL_REPO_ROOT) + "/tests/fixtures/diffusers-tiny";
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The reference shape of bench/engine-bench: SD1.5 + v2 motion modules, 16 × 32 × 32 latents.
JobSpec Reference(int64_t batch) {
  auto spec = ParseJobSpec(
      "model: {preset: sd15}\n"
      "data: {kind: synthetic, frames: 16, height: 32, width: 32, text_len: 77}\n"
      "train: {batch_size: " +
      std::to_string(batch) + "}\n");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.value();
}

double EstimateGiB(const JobSpec& spec) {
  auto e = EstimateTrainingMemory(spec);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? static_cast<double>(e->peak_bytes()) / kGiB : 0;
}

TEST(MemoryEstimateTest, WithinFifteenPercentOfTheMeasuredPeaksAtTheReferenceShape) {
  // bench/results: channelslast_h200_20261204.md, lora_h100_20261205.md,
  // ema_sidestream_mix3_h100_20261206.md (allocator peaks, the same on H100 and H200), the
  // calibration points, then the held-out ones.
  struct Case {
    const char* name;
    int64_t batch;
    GradientCheckpointing checkpointing;
    bool lora, ema;
    double measured_gib;
  };
  const Case cases[] = {
      {"b1", 1, GradientCheckpointing::kNone, false, false, 14.0},
      {"b8", 8, GradientCheckpointing::kNone, false, false, 46.2},
      {"b8-ckptres", 8, GradientCheckpointing::kResnets, false, false, 45.4},
      {"b8-ckpt", 8, GradientCheckpointing::kFull, false, false, 14.8},
      {"b8-ema", 8, GradientCheckpointing::kNone, false, true, 47.9},
      {"b1-lora", 1, GradientCheckpointing::kNone, true, false, 7.3},
      {"b8-lora", 8, GradientCheckpointing::kNone, true, false, 36.1},
      // Held out: bench/results/memory_estimate_h100_20261206.md.
      {"b2", 2, GradientCheckpointing::kNone, false, false, 18.6},
      {"b4", 4, GradientCheckpointing::kNone, false, false, 27.8},
      {"b4-ckpt", 4, GradientCheckpointing::kFull, false, false, 11.7},
      {"b4-ckptres", 4, GradientCheckpointing::kResnets, false, false, 27.4},
      {"b4-ema", 4, GradientCheckpointing::kNone, false, true, 29.5},
      {"b4-lora", 4, GradientCheckpointing::kNone, true, false, 19.6},
      {"b8-lora-ckpt", 8, GradientCheckpointing::kFull, true, false, 9.1},
  };
  for (const Case& c : cases) {
    JobSpec spec = Reference(c.batch);
    spec.model.gradient_checkpointing = c.checkpointing;
    if (c.lora) spec.model.lora.rank = 64, spec.model.lora.alpha = 64;
    if (c.ema) spec.train.ema.decay = 0.9999;
    const double estimate = EstimateGiB(spec);
    EXPECT_NEAR(estimate, c.measured_gib, 0.15 * c.measured_gib) << c.name;
  }
}

TEST(MemoryEstimateTest, TermsFollowBatchCheckpointingPrecisionAndEma) {
  JobSpec b1 = Reference(1);
  JobSpec b4 = Reference(4);
  auto e1 = EstimateTrainingMemory(b1).value();
  auto e4 = EstimateTrainingMemory(b4).value();
  // Only the activations grow with the batch, linearly.
  EXPECT_EQ(e4.weights_bytes, e1.weights_bytes);
  EXPECT_EQ(e4.trainable_bytes, e1.trainable_bytes);
  EXPECT_NEAR(static_cast<double>(e4.activation_bytes), 4.0 * e1.activation_bytes, 4.0);
  // SD1.5's counts: the frozen image UNet in bf16, the 453 M motion parameters trained.
  EXPECT_EQ(e1.frozen_params, 859520964);
  EXPECT_EQ(e1.trainable_params, 453209280);
  EXPECT_EQ(e1.weights_bytes, 2 * 859520964LL);

  JobSpec full = b4;
  full.model.gradient_checkpointing = GradientCheckpointing::kFull;
  EXPECT_LT(EstimateTrainingMemory(full)->activation_bytes, e4.activation_bytes / 4);

  JobSpec fp32 = b4;
  fp32.train.precision = Precision::kFp32;
  auto e32 = EstimateTrainingMemory(fp32).value();
  EXPECT_EQ(e32.weights_bytes, 2 * e4.weights_bytes);
  EXPECT_NEAR(static_cast<double>(e32.activation_bytes), 2.0 * e4.activation_bytes, 4.0);

  JobSpec ema = b4;
  ema.train.ema.decay = 0.999;
  EXPECT_EQ(EstimateTrainingMemory(ema)->trainable_bytes - e4.trainable_bytes,
            4 * e4.trainable_params);
  ema.train.ema.device = EmaDevice::kCpu;  // in host memory: nothing on the GPU
  EXPECT_EQ(EstimateTrainingMemory(ema)->trainable_bytes, e4.trainable_bytes);

  // Twice the frames, twice the activations.
  JobSpec frames = b4;
  frames.data.frames = 32;
  EXPECT_NEAR(static_cast<double>(EstimateTrainingMemory(frames)->activation_bytes),
              2.0 * e4.activation_bytes, 4.0);
  // v1 motion modules have no mid-block module.
  JobSpec v1 = b1;
  v1.model.preset_layout = PresetLayout::kV1;
  EXPECT_EQ(EstimateTrainingMemory(v1)->trainable_params, 417137600);
}

TEST(MemoryEstimateTest, ALoraTrainsItsAdaptersOverTheFrozenModules) {
  JobSpec spec = Reference(1);
  spec.model.lora.rank = 64;
  auto e = EstimateTrainingMemory(spec).value();
  // Rank 64 on q, k, v and out of the two attention blocks of each of the 21 modules:
  // 8 projections × 64 × (C + C), Σ C = 5 × (320 + 640 + 1280 + 1280) + 1280.
  EXPECT_EQ(e.trainable_params, 8 * 64 * 2 * 18880LL);
  EXPECT_EQ(e.frozen_params, 859520964LL + 453209280LL);
}

TEST(MemoryEstimateTest, CountsComeFromTheWeightsFilesHeaders) {
  auto spec = ParseJobSpec("model: {unet2d: " + kTiny + "/unet2d, motion_adapter: " + kTiny +
                           "/motion_adapter, lora: {rank: 2}}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto e = EstimateTrainingMemory(*spec);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  // The fixtures' parameters: 1,106,212 in the image UNet, 664,736 in the motion adapter (its
  // 682,144 elements less 17,408 of positional-encoding buffers), which is also 22C² + 21C for
  // each of its 11 modules (C = 32, 64).
  EXPECT_EQ(e->frozen_params, 1106212 + 664736);
  EXPECT_GT(e->trainable_params, 0);
  EXPECT_NE(e->basis.find("motion_adapter"), std::string::npos) << e->basis;
  EXPECT_NE(e->basis.find("unet2d"), std::string::npos) << e->basis;

  // The combined folder: its own motion modules are the trained ones.
  auto combined = ParseJobSpec("model: {unet_motion: " + kTiny + "/unet_motion}\n");
  ASSERT_TRUE(combined.ok());
  auto c = EstimateTrainingMemory(*combined).value();
  EXPECT_EQ(c.trainable_params, 664736);
  EXPECT_EQ(c.frozen_params, 1106212);
}

TEST(MemoryEstimateTest, APreprocessJobHasNone) {
  JobSpec spec;
  spec.kind = JobKind::kPreprocess;
  auto e = EstimateTrainingMemory(spec);
  EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace adctl
