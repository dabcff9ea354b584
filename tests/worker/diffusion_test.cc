// Noise schedules and DDIM against diffusers' schedulers (fixtures/schedulers.safetensors).
#include <gtest/gtest.h>

#include "worker/diffusion/ddpm.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

const std::string kFile =
    std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny/schedulers.safetensors";

double RelativeError(const torch::Tensor& out, const torch::Tensor& ref) {
  return ((out - ref).norm() / ref.norm()).item<double>();
}

class SchedulerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SchedulerTest, MatchesDiffusers) {
  auto ref = ReadTensorFile(kFile);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto& r = *ref;
  const std::string p = GetParam() + ".";
  auto s = NoiseSchedule::Make(GetParam(), 0.00085, 0.012, 1000);
  ASSERT_TRUE(s.ok());
  EXPECT_LT(RelativeError(s->alphas_cumprod(), r[p + "alphas_cumprod"]), 1e-6);
  EXPECT_LT(RelativeError(s->AddNoise(r[p + "x0"], r[p + "noise"], r[p + "t"]), r[p + "noisy"]),
            1e-6);
  EXPECT_LT(RelativeError(s->Velocity(r[p + "x0"], r[p + "noise"], r[p + "t"]), r[p + "v_target"]),
            1e-6);
  EXPECT_TRUE(torch::equal(s->DdimTimesteps(25), r[p + "ddim25_timesteps"]));
  const int64_t t = r[p + "ddim_t"].item<int64_t>();
  EXPECT_LT(
      RelativeError(s->DdimStep(r[p + "ddim_eps"], t, r[p + "ddim_xt"], 25), r[p + "ddim_prev"]),
      1e-5);
}

INSTANTIATE_TEST_SUITE_P(Schedules, SchedulerTest, ::testing::Values("linear", "scaled_linear"));

TEST(Scheduler, UnknownScheduleIsAnError) {
  auto s = NoiseSchedule::Make("cosine", 0.00085, 0.012, 1000);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("train.beta_schedule"), std::string::npos);
}

TEST(Scheduler, LinearScheduleEndpointsMatchTheSpec) {
  auto s = NoiseSchedule::Make("linear", 0.00085, 0.012, 1000);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->alphas_cumprod()[999].item<double>(), 0.001579, 2e-6);
  EXPECT_NEAR(s->alphas_cumprod()[499].item<double>(), 0.1618, 1e-4);
}

}  // namespace
}  // namespace adctl
