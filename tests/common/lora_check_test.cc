#include "common/lora_check.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/safetensors.h"
#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

const std::string kTiny = std::string(ADCTL_REPO_ROOT) + "/tests/fixtures/diffusers-tiny";

// The vendored tiny model: a MotionAdapter whose narrowest projection is 32 wide, a UNet2D with
// spatial transformers, and a rank-4 MotionLoRA.
ModelSpec TinyLora(int64_t rank) {
  ModelSpec m;
  m.unet2d = kTiny + "/unet2d";
  m.motion_adapter = kTiny + "/motion_adapter";
  m.lora.rank = rank;
  return m;
}

TEST(LoraCheckTest, ALoraThatFitsTheModelPasses) {
  EXPECT_TRUE(CheckLoraFitsModel(TinyLora(4)).ok());
  EXPECT_TRUE(CheckLoraFitsModel(TinyLora(32)).ok());
  ModelSpec both = TinyLora(8);
  both.lora.scope = LoraScope::kBoth;
  both.lora.targets = {"to_q", "to_out.0"};
  EXPECT_TRUE(CheckLoraFitsModel(both).ok());
  EXPECT_TRUE(CheckLoraFitsModel(ModelSpec{}).ok());  // no LoRA
}

TEST(LoraCheckTest, ARankAboveALayersWidthNamesTheLayer) {
  const Status s = CheckLoraFitsModel(TinyLora(33));
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model.lora.rank: 33 is above the width of down_blocks.0."),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("(32)"), std::string::npos) << s.message();
}

TEST(LoraCheckTest, ATargetThatMatchesNothingInScopeIsNamed) {
  // A base motion module with only query projections.
  TempDir dir;
  std::vector<float> w(8 * 8, 0.f);
  const std::string file = dir.file("mm.safetensors");
  ASSERT_TRUE(WriteSafetensors(file, {{"down_blocks.0.motion_modules.0.temporal_transformer."
                                       "transformer_blocks.0.attention_blocks.0.to_q.weight",
                                       DType::kF32,
                                       {8, 8},
                                       w.data(),
                                       w.size() * sizeof(float)}})
                  .ok());
  ModelSpec m;
  m.unet2d = kTiny + "/unet2d";
  m.motion_module_file = file;
  m.lora.rank = 4;
  m.lora.targets = {"to_q"};
  EXPECT_TRUE(CheckLoraFitsModel(m).ok());
  m.lora.targets = {"to_q", "to_v"};
  const Status s = CheckLoraFitsModel(m);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("model.lora.targets: 'to_v' matches no projection in the motion "
                             "modules of " +
                             file),
            std::string::npos)
      << s.message();
}

TEST(LoraCheckTest, InitFromMustHaveTheSpecsRank) {
  ModelSpec m = TinyLora(4);
  m.lora.init_from = kTiny + "/motion_lora.safetensors";
  EXPECT_TRUE(CheckLoraFitsModel(m).ok());
  m.lora.rank = 8;
  const Status s = CheckLoraFitsModel(m);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("holds a rank-4 LoRA"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("model.lora.rank is 8"), std::string::npos) << s.message();
  // A weights file that is no LoRA.
  m.lora.init_from = kTiny + "/motion_adapter/diffusion_pytorch_model.safetensors";
  EXPECT_NE(CheckLoraFitsModel(m).message().find("holds no LoRA tensor"), std::string::npos);
}

TEST(LoraCheckTest, MissingFilesAreLeftToTheWorker) {
  ModelSpec m = TinyLora(4);
  m.motion_adapter = "/nonexistent/motion_adapter";
  m.lora.init_from = "/nonexistent/lora.safetensors";
  EXPECT_TRUE(CheckLoraFitsModel(m).ok());
}

}  // namespace
}  // namespace adctl
