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

class SchedulerTest : public ::testing::TestWithParam<BetaSchedule> {};

TEST_P(SchedulerTest, MatchesDiffusers) {
  auto ref = ReadTensorFile(kFile);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  auto& r = *ref;
  const std::string p = Name(GetParam()) + ".";
  auto s = NoiseSchedule::Make(GetParam(), 0.00085, 0.012, 1000);
  ASSERT_TRUE(s.ok());
  EXPECT_LT(RelativeError(s->alphas_cumprod(), r[p + "alphas_cumprod"]), 1e-6);
  EXPECT_LT(RelativeError(s->AddNoise(r[p + "x0"], r[p + "noise"], r[p + "t"]), r[p + "noisy"]),
            1e-6);
  EXPECT_LT(RelativeError(s->Velocity(r[p + "x0"], r[p + "noise"], r[p + "t"]), r[p + "v_target"]),
            1e-6);
  // The fixture's DDIM: 25 steps, leading spacing, steps_offset 1, set_alpha_to_one false.
  DdimOptions o;
  o.set_alpha_to_one = false;
  auto ddim = DdimScheduler::Make(*s, o);
  ASSERT_TRUE(ddim.ok()) << ddim.status().ToString();
  EXPECT_TRUE(torch::equal(ddim->timesteps(), r[p + "ddim25_timesteps"]));
  const int64_t t = r[p + "ddim_t"].item<int64_t>();
  EXPECT_LT(RelativeError(ddim->Step(r[p + "ddim_eps"], t, r[p + "ddim_xt"]), r[p + "ddim_prev"]),
            1e-5);
}

INSTANTIATE_TEST_SUITE_P(Schedules, SchedulerTest,
                         ::testing::Values(BetaSchedule::kLinear, BetaSchedule::kScaledLinear));

TEST(Scheduler, PretrainedIsNoScheduleOfItsOwn) {
  auto s = NoiseSchedule::Make(BetaSchedule::kPretrained, 0.00085, 0.012, 1000);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("train.beta_schedule"), std::string::npos);
}

TEST(Scheduler, DdimSpacingsMatchDiffusersTables) {
  auto s = NoiseSchedule::Make(BetaSchedule::kLinear, 0.00085, 0.012, 1000);
  ASSERT_TRUE(s.ok());
  auto timesteps = [&](TimestepSpacing spacing, int64_t offset) {
    DdimOptions o;
    o.num_inference_steps = 10;
    o.timestep_spacing = spacing;
    o.steps_offset = offset;
    auto d = DdimScheduler::Make(*s, o);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    const auto t = d->timesteps();
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  };
  // diffusers 0.40 DDIMScheduler.set_timesteps(10) with these configs.
  EXPECT_EQ(timesteps(TimestepSpacing::kLeading, 1),
            (std::vector<int64_t>{901, 801, 701, 601, 501, 401, 301, 201, 101, 1}));
  EXPECT_EQ(timesteps(TimestepSpacing::kTrailing, 0),
            (std::vector<int64_t>{999, 899, 799, 699, 599, 499, 399, 299, 199, 99}));
  EXPECT_EQ(timesteps(TimestepSpacing::kLinspace, 0),
            (std::vector<int64_t>{999, 888, 777, 666, 555, 444, 333, 222, 111, 0}));
  DdimOptions bad;
  bad.num_inference_steps = 0;
  EXPECT_FALSE(DdimScheduler::Make(*s, bad).ok());
}

TEST(Scheduler, DdimWithEtaAddsSeededNoise) {
  auto s = NoiseSchedule::Make(BetaSchedule::kLinear, 0.00085, 0.012, 1000);
  ASSERT_TRUE(s.ok());
  DdimOptions o;
  o.num_inference_steps = 10;
  o.eta = 1.0;
  auto d = DdimScheduler::Make(*s, o);
  ASSERT_TRUE(d.ok());
  auto x = torch::randn({1, 4, 2, 4, 4});
  auto eps = torch::randn({1, 4, 2, 4, 4});
  auto a = d->Step(eps, 501, x, at::detail::createCPUGenerator(7));
  auto b = d->Step(eps, 501, x, at::detail::createCPUGenerator(7));
  auto c = d->Step(eps, 501, x, at::detail::createCPUGenerator(8));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c));
  o.eta = 0;
  auto det = DdimScheduler::Make(*s, o);
  EXPECT_FALSE(torch::allclose(a, det->Step(eps, 501, x)));
}

TEST(Scheduler, LinearScheduleEndpointsMatchTheSpec) {
  auto s = NoiseSchedule::Make(BetaSchedule::kLinear, 0.00085, 0.012, 1000);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->alphas_cumprod()[999].item<double>(), 0.001579, 2e-6);
  EXPECT_NEAR(s->alphas_cumprod()[499].item<double>(), 0.1618, 1e-4);
}

}  // namespace
}  // namespace adctl
