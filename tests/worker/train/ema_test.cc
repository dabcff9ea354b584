// train.ema (worker/train/ema.h) against diffusers' EMAModel: five updates over a recorded
// sequence of weights (tests/fixtures/ema/, made by make_ema_reference.py beside it).
#include "worker/train/ema.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/safetensors.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

const std::string kEmaFixture = std::string(ADCTL_FIXTURES_DIR) + "/ema/ema5_reference.safetensors";

double MaxRelativeError(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item<double>();
}

TEST(EmaTest, FiveUpdatesMatchDiffusersEmaModel) {
  auto ref = ReadTensorFile(kEmaFixture);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto file = SafetensorsFile::Open(kEmaFixture);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto settings = nlohmann::json::parse((*file)->metadata().at("settings"));
  ASSERT_EQ(settings.size(), 3u);
  for (const auto& [cfg, s] : settings.items()) {
    SCOPED_TRACE(cfg);
    EmaSpec spec;
    spec.decay = s["adctl"]["decay"];
    spec.start_step = s["adctl"]["start_step"];
    spec.update_every = s["adctl"]["update_every"];
    // The live weights, starting where the reference's did.
    Ema::NamedTensors params;
    for (const auto& [key, t] : *ref) {
      if (key.rfind("init.", 0) == 0) params.emplace_back(key.substr(5), t.clone());
    }
    ASSERT_EQ(params.size(), 6u);
    Ema ema(spec, params);
    const auto decays = ref->at("decay." + cfg);
    for (int k = 1; k <= 5; ++k) {
      for (auto& [name, p] : params) p.copy_(ref->at("weights." + std::to_string(k) + "." + name));
      // Training step k * update_every is the k-th update.
      EXPECT_TRUE(ema.AfterStep(k * spec.update_every));
      EXPECT_FALSE(spec.update_every > 1 && ema.AfterStep(k * spec.update_every + 1));
      EXPECT_EQ(ema.updates(), k);
      EXPECT_NEAR(ema.last_decay(), decays[k - 1].item<double>(), 1e-15) << "update " << k;
    }
    for (const auto& [name, avg] : ema.averages()) {
      EXPECT_LT(MaxRelativeError(avg, ref->at("ema." + cfg + "." + name)), 1e-6) << name;
    }
  }
}

TEST(EmaTest, DecayFollowsTheWarmUpRuleUnderTheCap) {
  EmaSpec spec;
  spec.decay = 0.5;
  EXPECT_EQ(Ema::Decay(spec, 1), 0.0);         // the first update copies
  EXPECT_EQ(Ema::Decay(spec, 2), 2.0 / 11.0);  // (1 + n) / (10 + n), n = 1
  EXPECT_EQ(Ema::Decay(spec, 9), 0.5);         // 9/18: the cap from here on
  EXPECT_EQ(Ema::Decay(spec, 1000), 0.5);
  spec.start_step = 10;
  spec.update_every = 5;  // update_after_step 2
  EXPECT_EQ(Ema::Decay(spec, 3), 0.0);
  EXPECT_EQ(Ema::Decay(spec, 4), 2.0 / 11.0);
}

TEST(EmaTest, AppliedPutsTheAverageInAndTheWeightsBack) {
  EmaSpec spec;
  spec.decay = 0.9;
  auto w = torch::zeros({4});
  Ema ema(spec, {{"w", w}});
  w.fill_(1.0);
  ema.Update();  // a copy: 1
  w.fill_(3.0);
  ema.Update();  // 1 - (1 - 2/11) (1 - 3)
  const double expected = 1.0 + (9.0 / 11.0) * 2.0;
  EXPECT_NEAR(ema.averages()[0].second[0].item<double>(), expected, 1e-6);
  const void* storage = w.data_ptr();
  {
    Ema::Applied applied(&ema);
    EXPECT_NEAR(w[0].item<double>(), expected, 1e-6);
  }
  EXPECT_EQ(w[0].item<double>(), 3.0);
  EXPECT_EQ(w.data_ptr(), storage) << "the weights keep their storage (CUDA graphs)";
}

TEST(EmaTest, RestoreTakesACheckpointsAveragesAndCount) {
  EmaSpec spec;
  spec.decay = 0.9;
  auto w = torch::ones({3});
  Ema ema(spec, {{"layer.lora_A.weight", w}});
  TensorMap saved = {{"unet.layer.lora_A.weight", torch::full({3}, 7.0)}};
  ASSERT_TRUE(ema.Restore(saved, 12, "unet.").ok());
  EXPECT_EQ(ema.updates(), 12);
  EXPECT_EQ(ema.averages()[0].second[1].item<double>(), 7.0);
  const Status missing = ema.Restore({}, 1);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("layer.lora_A.weight"), std::string::npos) << missing.message();
  ema.Reset();
  EXPECT_EQ(ema.updates(), 0);
  EXPECT_EQ(ema.averages()[0].second[1].item<double>(), 1.0);
}

}  // namespace
}  // namespace adctl
