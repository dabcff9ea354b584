// GradientReducer over Gloo: N ranks with batch b equal 1 rank with batch N*b.
#include "worker/dist/gradient_reducer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include "tests/dist/multiprocess.h"
#include "tests/dist/tiny_training.h"
#include "worker/dist/directory_kv_store.h"

namespace adctl {
namespace {

using std::chrono::seconds;

// Small buckets, so the tiny model (1540 parameters) spreads over several.
ReducerOptions SmallBuckets(bool bf16) {
  ReducerOptions options;
  options.bucket_cap_mb = 1024.0 / (1 << 20);   // 1 KiB
  options.first_bucket_mb = 256.0 / (1 << 20);  // 256 B
  options.bf16_buckets = bf16;
  return options;
}

ADCTL_RANK_ROLE(tiny_training) {
  auto store = MakeDirectoryKeyValueStore(env.dir + "/kv");
  auto comm = MakeCommunicator("gloo", store.get(), env.rank, env.world_size, seconds(30));
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 10;
  }
  torch::set_num_threads(1);
  const test::TinyTrainingResult result =
      test::TrainTinyModel(comm->get(), test::TinyTrainingConfig::FromEnv());
  result.Save(env.dir + "/result-" + std::to_string(env.rank) + ".pt");
  return 0;
}

struct Comparison {
  test::TinyTrainingResult initial;  // rank 0's weights before training
  test::TinyTrainingResult reference;
  std::vector<test::TinyTrainingResult> ranks;
};

// Trains `world_size` ranks with batch b in processes and one rank with batch world_size*b here.
Comparison TrainBothWays(int world_size, test::TinyTrainingConfig config) {
  Comparison comparison;
  test::TinyTrainingConfig untrained = config;
  untrained.steps = 0;
  comparison.initial = test::TrainTinyModel(nullptr, untrained);
  const std::string dir = test::MakeTempDir("reducer");
  const auto outcomes =
      test::RunRanks("tiny_training", world_size, dir, seconds(120), {}, config.ToEnv());
  for (const auto& o : outcomes) {
    EXPECT_EQ(o.exit_code, 0) << test::Describe(outcomes);
    if (o.exit_code != 0) return comparison;
  }
  for (int r = 0; r < world_size; ++r) {
    comparison.ranks.push_back(
        test::TinyTrainingResult::Load(dir + "/result-" + std::to_string(r) + ".pt"));
  }
  config.batch_per_rank *= world_size;
  comparison.reference = test::TrainTinyModel(nullptr, config);
  return comparison;
}

// Losses within `loss_tolerance`; weights within `weight_tolerance` elementwise, or, when that
// is 0, within `relative_update_tolerance` as RelativeUpdateDifference (bf16 buckets: Adam turns
// the rounding of nearly cancelling gradient elements into full-size steps, so an elementwise
// bound says little there).
void ExpectEqualTraining(const Comparison& c, double loss_tolerance, double weight_tolerance,
                         double relative_update_tolerance) {
  ASSERT_FALSE(c.ranks.empty());
  const double moved = test::MaxParameterDifference(c.reference.params, c.initial.params);
  EXPECT_GT(moved, 1e-2) << "training must move the weights for the comparison to mean much";
  for (size_t r = 0; r < c.ranks.size(); ++r) {
    const auto& rank = c.ranks[r];
    ASSERT_EQ(rank.losses.size(), c.reference.losses.size());
    for (size_t s = 0; s < rank.losses.size(); ++s) {
      EXPECT_NEAR(rank.losses[s], c.reference.losses[s], loss_tolerance)
          << "rank " << r << " step " << s;
    }
    const double difference = test::MaxParameterDifference(rank.params, c.reference.params);
    const double relative =
        test::RelativeUpdateDifference(rank.params, c.reference.params, c.initial.params);
    std::printf(
        "rank %zu: max |weight - reference| = %.3g, relative update difference %.3g, "
        "max |reference - initial| = %.3g\n",
        r, difference, relative, moved);
    EXPECT_LE(difference, weight_tolerance) << "rank " << r;
    EXPECT_LE(relative, relative_update_tolerance) << "rank " << r;
    // Every rank applied the same averaged gradients to the same weights.
    EXPECT_EQ(test::MaxParameterDifference(rank.params, c.ranks[0].params), 0.0) << "rank " << r;
    // Communication overlapped: every bucket went out during backward.
    EXPECT_EQ(rank.buckets_launched_during_backward,
              static_cast<int64_t>(rank.bucket_sizes_bytes.size()));
    EXPECT_GE(rank.bucket_sizes_bytes.size(), 3u);
  }
}

TEST(GradientReducerTest, TwoRanksSgdEqualOneRankWithDoubleBatch) {
  test::TinyTrainingConfig config;
  config.reducer = SmallBuckets(false);
  ExpectEqualTraining(TrainBothWays(2, config), 1e-6, 1e-6, 1e-5);
}

TEST(GradientReducerTest, TwoRanksAdamWWithAccumulationEqualOneRankWithDoubleBatch) {
  test::TinyTrainingConfig config;
  config.optimizer = "adamw";
  config.lr = 0.01;
  config.accumulation = 3;
  config.reducer = SmallBuckets(false);
  ExpectEqualTraining(TrainBothWays(2, config), 1e-6, 1e-5, 1e-4);
}

TEST(GradientReducerTest, ThreeRanksSgdWithAccumulationEqualOneRankWithTripleBatch) {
  test::TinyTrainingConfig config;
  config.accumulation = 2;
  config.batch_per_rank = 3;
  config.reducer = SmallBuckets(false);
  ExpectEqualTraining(TrainBothWays(3, config), 1e-6, 1e-6, 1e-5);
}

TEST(GradientReducerTest, TwoRanksWithBf16BucketsStayCloseToOneRank) {
  test::TinyTrainingConfig config;
  config.accumulation = 2;
  config.reducer = SmallBuckets(true);
  const Comparison c = TrainBothWays(2, config);
  // bf16 keeps 8 significant bits: gradients are off by up to 2^-9 relative.
  ExpectEqualTraining(c, 1e-3, 5e-4, 1e-2);
  ASSERT_FALSE(c.ranks.empty());
  int64_t bytes = 0;
  for (int64_t b : c.ranks[0].bucket_sizes_bytes) bytes += b;
  EXPECT_EQ(bytes, 1540 * 2);  // every gradient element travels as 2 bytes
}

TEST(GradientReducerTest, TwoRanksAdamWWithBf16BucketsStayCloseToOneRank) {
  test::TinyTrainingConfig config;
  config.optimizer = "adamw";
  config.lr = 0.01;
  config.reducer = SmallBuckets(true);
  ExpectEqualTraining(TrainBothWays(2, config), 1e-3, 0.05, 0.05);
}

// In-process tests with a one-rank Gloo communicator.
class OneRankReducerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = MakeDirectoryKeyValueStore(test::MakeTempDir("reducer"));
    auto comm = MakeCommunicator("gloo", store_.get(), 0, 1, seconds(10));
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    comm_ = std::move(comm).value();
  }
  std::unique_ptr<KeyValueStore> store_;
  std::unique_ptr<Communicator> comm_;
};

TEST_F(OneRankReducerTest, OneRankThroughTheReducerIsBitwiseEqualToPlainTraining) {
  test::TinyTrainingConfig config;
  config.accumulation = 2;
  config.optimizer = "adamw";
  config.reducer = SmallBuckets(false);
  const auto reduced = test::TrainTinyModel(comm_.get(), config);
  const auto plain = test::TrainTinyModel(nullptr, config);
  EXPECT_EQ(reduced.losses, plain.losses);
  EXPECT_EQ(test::MaxParameterDifference(reduced.params, plain.params), 0.0);
}

TEST_F(OneRankReducerTest, BucketsFollowReverseRegistrationOrderWithASmallFirstBucket) {
  // Five parameters of 100 floats (400 B): first bucket cap 256 B, then 1 KiB.
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 5; ++i) params.push_back(torch::zeros({10, 10}).requires_grad_());
  ReducerOptions options = SmallBuckets(false);
  options.rebuild_buckets = false;
  GradientReducer reducer(comm_.get(), params, options);
  // Reverse order: p4 alone fills the first bucket (400 >= 256); p3 p2 p1 reach 1200 >= 1024;
  // p0 is what is left.
  EXPECT_EQ(reducer.bucket_sizes_bytes(), (std::vector<int64_t>{400, 1200, 400}));
  options.bf16_buckets = true;
  GradientReducer bf16(comm_.get(), params, options);
  // 2-byte elements: p4 + p3 reach the first cap; p2 p1 p0 stay under 1 KiB.
  EXPECT_EQ(bf16.bucket_sizes_bytes(), (std::vector<int64_t>{400, 600}));
}

TEST_F(OneRankReducerTest, TheFirstBucketGoesOutBeforeBackwardEnds) {
  // A chain p0 -> p1 -> ... -> p4: backward produces p4's gradient first and p0's last.
  std::vector<torch::Tensor> params;
  for (int i = 0; i < 5; ++i) params.push_back(torch::full({64}, 1.0 + i).requires_grad_());
  ReducerOptions options = SmallBuckets(false);
  GradientReducer reducer(comm_.get(), params, options);
  torch::Tensor x = torch::ones({64});
  for (const auto& p : params) x = torch::sin(x * p);
  reducer.PrepareForBackward(true);
  x.sum().backward();
  EXPECT_EQ(reducer.last_buckets_launched_during_backward(),
            static_cast<int64_t>(reducer.bucket_sizes_bytes().size()));
  reducer.FinishBackward();
  EXPECT_GE(reducer.last_exposed_allreduce_seconds(), 0.0);
}

TEST_F(OneRankReducerTest, AParameterWithoutGradientGetsZerosAndTheStepCompletes) {
  auto used = torch::ones({8}).requires_grad_();
  auto unused = torch::ones({8}).requires_grad_();
  GradientReducer reducer(comm_.get(), {used, unused}, SmallBuckets(false));
  reducer.PrepareForBackward(true);
  (used * 3).sum().backward();
  reducer.FinishBackward();
  EXPECT_TRUE(torch::equal(used.grad(), torch::full({8}, 3.0)));
  ASSERT_TRUE(unused.grad().defined());
  EXPECT_TRUE(torch::equal(unused.grad(), torch::zeros({8})));
}

TEST_F(OneRankReducerTest, AccumulationMicroStepsDoNotCommunicate) {
  auto p = torch::ones({8}).requires_grad_();
  GradientReducer reducer(comm_.get(), {p}, SmallBuckets(false));
  reducer.PrepareForBackward(false);
  (p * 2).sum().backward();
  EXPECT_EQ(reducer.last_buckets_launched_during_backward(), 0);
  reducer.PrepareForBackward(true);
  (p * 5).sum().backward();
  reducer.FinishBackward();
  EXPECT_TRUE(torch::equal(p.grad(), torch::full({8}, 7.0)));  // 2 + 5, summed over micro-steps
}

TEST_F(OneRankReducerTest, MisuseIsReported) {
  auto p = torch::ones({8}).requires_grad_();
  EXPECT_THROW(GradientReducer(comm_.get(), {torch::ones({8})}, {}), std::invalid_argument);
  EXPECT_THROW(GradientReducer(comm_.get(), {torch::ones({4, 4}).t().requires_grad_()}, {}),
               std::invalid_argument);
  GradientReducer reducer(comm_.get(), {p}, {});
  EXPECT_THROW(reducer.FinishBackward(), std::logic_error);
  reducer.PrepareForBackward(true);
  EXPECT_THROW(reducer.PrepareForBackward(true), std::logic_error);
}

TEST_F(OneRankReducerTest, BroadcastParametersKeepsValuesOnOneRank) {
  auto a = torch::arange(6, torch::kFloat).reshape({2, 3}).requires_grad_();
  auto b = torch::full({4}, 2.5).requires_grad_();
  GradientReducer reducer(comm_.get(), {a, b}, {});
  reducer.BroadcastParameters(0);
  EXPECT_TRUE(torch::equal(a, torch::arange(6, torch::kFloat).reshape({2, 3})));
  EXPECT_TRUE(torch::equal(b, torch::full({4}, 2.5)));
}

}  // namespace
}  // namespace adctl
