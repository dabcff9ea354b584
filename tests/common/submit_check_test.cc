// What adctld checks at submit from a spec's inputs (issue 35 item 2): frames beyond the motion
// modules' positional table, a latent cache that is not there, and data.frames that disagrees
// with the cache, each refused naming the field.
#include "common/submit_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kFixtures = std::string(ADCTL_REPO_ROOT) + "/tests/fixtures";

class SubmitCheckTest : public ::testing::Test {
 protected:
  // A latent cache folder whose settings.json says `frames` (and the pixel size).
  std::string Cache(int frames, int side = 256, const std::string& tag = "") {
    const fs::path cache = dir_ / ("cache" + std::to_string(frames) +
                                   (side == 256 ? "" : "-" + std::to_string(side)) + tag);
    fs::create_directories(cache / "shards");
    std::ofstream(cache / "settings.json")
        << "{\"frames\": " << frames << ", \"stride\": 4, \"sample_height\": " << side
        << ", \"sample_width\": " << side << "}\n";
    return cache.string();
  }
  static JobSpec Tiny() {
    JobSpec s;
    s.model.preset = ModelPreset::kTiny;
    return s;
  }

  const TempDir tmp_;
  const fs::path dir_{tmp_.path()};
};

TEST_F(SubmitCheckTest, TheMotionModulesPositionalTableBoundsTheFrames) {
  ModelSpec m;
  m.preset = ModelPreset::kTiny;
  EXPECT_EQ(MotionFramesLimit(m), 32);
  m.preset_layout = PresetLayout::kV1;
  EXPECT_EQ(MotionFramesLimit(m), 24);
  ModelSpec adapter;
  adapter.unet2d = kFixtures + "/diffusers-tiny/unet2d";
  adapter.motion_adapter = kFixtures + "/diffusers-tiny/motion_adapter";
  EXPECT_EQ(MotionFramesLimit(adapter), 32);  // its config.json
  ModelSpec file = adapter;
  file.motion_module_file = kFixtures + "/animatediff-tiny/mm_tiny.safetensors";
  EXPECT_EQ(MotionFramesLimit(file), 32);  // pos_encoder.pe [1, 32, C]
  // model.motion_max_frames stretches a shorter table, and leaves a longer one as it is.
  file.motion_max_frames = 64;
  EXPECT_EQ(MotionFramesLimit(file), 64);
  file.motion_max_frames = 16;
  EXPECT_EQ(MotionFramesLimit(file), 32);
  file.motion_module_file = kFixtures + "/animatediff-tiny/mm_tiny.ckpt";
  EXPECT_EQ(MotionFramesLimit(file), std::nullopt) << "a pickle is not read at submit";

  JobSpec s = Tiny();
  s.validation.prompts = {"a cat"};
  s.validation.frames = 40;
  auto st = CheckSubmitInputs(s, {});
  EXPECT_THAT(st.message(), HasSubstr("validation.frames: 40, the motion modules hold at most 32"));
  s.validation.frames = 16;
  s.data.frames = 33;
  EXPECT_THAT(CheckSubmitInputs(s, {}).message(), HasSubstr("data.frames: 33"));
  s.data.frames = 32;
  EXPECT_TRUE(CheckSubmitInputs(s, {}).ok());
}

TEST_F(SubmitCheckTest, AMissingCacheIsRefusedUnlessAQueuedJobWritesIt) {
  JobSpec s = Tiny();
  s.data.kind = DataKind::kLatents;
  s.data.path = (dir_ / "not-yet").string();
  auto st = CheckSubmitInputs(s, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("data.path: " + s.data.path + " does not exist"));
  SubmitInputs queued;
  queued.caches_being_written = {s.data.path};
  EXPECT_TRUE(CheckSubmitInputs(s, queued).ok()) << "a preprocess job in the queue makes it";
  s.data.path = Cache(8);
  s.eval.path = (dir_ / "no-eval-cache").string();
  EXPECT_THAT(CheckSubmitInputs(s, {}).message(), HasSubstr("eval.path: "));
}

TEST_F(SubmitCheckTest, DataFramesThatDisagreeWithTheCacheAreRefusedWhenSet) {
  JobSpec s = Tiny();
  s.data.kind = DataKind::kLatents;
  s.data.path = Cache(8);
  s.data.frames = 16;
  EXPECT_TRUE(CheckSubmitInputs(s, {}).ok()) << "unset: the cache's frames are used";
  SubmitInputs set;
  set.data_frames_set = true;
  auto st = CheckSubmitInputs(s, set);
  EXPECT_THAT(st.message(), HasSubstr("data.frames: 16, and the cache in " + s.data.path +
                                      " was made with 8 frames"));
  s.data.frames = 8;
  EXPECT_TRUE(CheckSubmitInputs(s, set).ok());
  s.data.path = Cache(40);
  set.data_frames_set = false;
  EXPECT_THAT(CheckSubmitInputs(s, set).message(),
              HasSubstr("holds clips of 40 frames; the motion modules hold at most 32"));
}

// data.sources (issue 32 item 3): every cache of a mix is checked like data.path; caches of
// other frame counts and pixel sizes are shape buckets (item 4), within the motion modules' limit.
TEST_F(SubmitCheckTest, TheCachesOfAMixExistAndHoldNoClipLongerThanTheModules) {
  JobSpec s = Tiny();
  s.data.kind = DataKind::kLatents;
  s.data.sources = {{Cache(8), 3, 0}, {(dir_ / "missing").string(), 1, 0}};
  EXPECT_THAT(
      CheckSubmitInputs(s, {}).message(),
      HasSubstr("data.sources[1].path: " + (dir_ / "missing").string() + " does not exist"));
  s.data.sources[1].path = Cache(16);
  EXPECT_TRUE(CheckSubmitInputs(s, {}).ok());
  s.data.sources[1].path = Cache(8, 320);
  EXPECT_TRUE(CheckSubmitInputs(s, {}).ok());
  s.data.sources[1].path = Cache(8, 256, "-webvid");
  s.data.sources.push_back({Cache(40), 1, 0});
  EXPECT_THAT(CheckSubmitInputs(s, {}).message(),
              HasSubstr("data.sources[2].path: the cache in " + s.data.sources[2].path +
                        " holds clips of 40 frames; the motion modules hold at most 32"));
  s.data.sources.pop_back();
  EXPECT_TRUE(CheckSubmitInputs(s, {}).ok());
  SubmitInputs set;
  set.data_frames_set = true;
  s.data.frames = 4;
  EXPECT_THAT(CheckSubmitInputs(s, set).message(), HasSubstr("data.frames: 4, and the cache in"));
}

TEST(SpecNamesFieldTest, TheYamlOrAnOverrideNamesIt) {
  EXPECT_TRUE(SpecNamesField("data: {frames: 8}\n", {}, "data.frames"));
  EXPECT_FALSE(SpecNamesField("data: {kind: latents}\n", {}, "data.frames"));
  EXPECT_TRUE(SpecNamesField("data: {kind: latents}\n", {"data.frames=8"}, "data.frames"));
  EXPECT_FALSE(SpecNamesField("data: [1, 2]\n", {}, "data.frames"));
  EXPECT_FALSE(SpecNamesField("{{{", {}, "data.frames"));
}

// A cache made with preprocess.buckets: every bucket's frames are checked like a cache's.
TEST_F(SubmitCheckTest, EveryShapeBucketOfACacheIsCheckedAgainstTheModules) {
  const fs::path cache = dir_ / "bucketed";
  fs::create_directories(cache / "buckets");
  std::ofstream(cache / "settings.json")
      << "{\"frames\": 16, \"buckets\": [{\"width\": 512, \"height\": 320, \"frames\": 16}, "
         "{\"width\": 320, \"height\": 512, \"frames\": 40}]}\n";
  EXPECT_EQ(CacheFrames(cache.string()), (std::vector<int64_t>{16, 40}));
  JobSpec s = Tiny();
  s.data.kind = DataKind::kLatents;
  s.data.path = cache.string();
  EXPECT_THAT(CheckSubmitInputs(s, {}).message(),
              HasSubstr("data.path: the cache in " + cache.string() +
                        " holds clips of 40 frames; the motion modules hold at most 32"));
  std::ofstream(cache / "settings.json")
      << "{\"frames\": 16, \"buckets\": [{\"width\": 512, \"height\": 320, \"frames\": 16}, "
         "{\"width\": 320, \"height\": 512, \"frames\": 24}]}\n";
  EXPECT_TRUE(CheckSubmitInputs(s, {}).ok());
  SubmitInputs set;
  set.data_frames_set = true;
  s.data.frames = 16;
  EXPECT_THAT(CheckSubmitInputs(s, set).message(), HasSubstr("was made with 24 frames a clip"));
}

}  // namespace
}  // namespace adctl
