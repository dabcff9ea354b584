// TrainState: the checkpoint metadata keys, written and read back in one place.
#include "worker/train/train_state.h"

#include <gtest/gtest.h>

namespace adctl {
namespace {

TrainState Example() {
  TrainState s;
  s.step = 120;
  s.samples_seen = 960;
  s.sampler = {2, 48};
  s.world_size = 4;
  s.global_batch = 8;
  s.seed = 42;
  s.job_name = "motion-v2";
  return s;
}

TEST(TrainState, RoundTripsThroughJson) {
  const TrainState s = Example();
  auto back = TrainState::FromJson(s.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, s.step);
  EXPECT_EQ(back->samples_seen, s.samples_seen);
  EXPECT_EQ(back->sampler.epoch, s.sampler.epoch);
  EXPECT_EQ(back->sampler.position, s.sampler.position);
  EXPECT_EQ(back->world_size, s.world_size);
  EXPECT_EQ(back->global_batch, s.global_batch);
  EXPECT_EQ(back->seed, s.seed);
  EXPECT_EQ(back->job_name, s.job_name);
}

// Checkpoints already on disk carry these keys: renaming one breaks their resume.
TEST(TrainState, KeepsTheCheckpointKeys) {
  EXPECT_EQ(Example().ToJson(), nlohmann::json::parse(R"({
    "step": 120, "samples_seen": 960, "sampler_epoch": 2, "sampler_position": 48,
    "world_size": 4, "global_batch": 8, "seed": 42, "job_name": "motion-v2"})"));
}

TEST(TrainState, ReadsMetadataWithoutTheRunFields) {
  auto s = TrainState::FromJson(nlohmann::json::parse(
      R"({"step": 3, "samples_seen": 6, "sampler_epoch": 0, "sampler_position": 6})"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->step, 3);
  EXPECT_EQ(s->world_size, 1);
}

TEST(TrainState, AMissingOrMistypedKeyIsDataLoss) {
  nlohmann::json j = Example().ToJson();
  j.erase("sampler_position");
  auto missing = TrainState::FromJson(j);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.status().message().find("bad trainer state"), std::string::npos);
  EXPECT_NE(missing.status().message().find("sampler_position"), std::string::npos);
  j = Example().ToJson();
  j["step"] = "ten";
  EXPECT_FALSE(TrainState::FromJson(j).ok());
}

}  // namespace
}  // namespace adctl
