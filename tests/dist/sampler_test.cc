#include "worker/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

namespace adctl {
namespace {

// The global sequence of samples that `world_size` ranks drawing `count` each per step consume
// in `steps` steps, in global-position order (rank r's i-th sample sits at i*world_size + r).
std::vector<int64_t> GlobalSequence(std::vector<DistributedSampler>& ranks, int64_t count,
                                    int steps) {
  std::vector<int64_t> sequence;
  const int world_size = static_cast<int>(ranks.size());
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<int64_t>> drawn;
    for (auto& sampler : ranks) drawn.push_back(sampler.Next(count));
    for (int64_t i = 0; i < count; ++i) {
      for (int r = 0; r < world_size; ++r) sequence.push_back(drawn[r][i]);
    }
  }
  return sequence;
}

std::vector<DistributedSampler> Ranks(int64_t dataset_size, int world_size, uint64_t seed,
                                      bool shuffle = true) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world_size; ++r)
    ranks.emplace_back(dataset_size, r, world_size, seed, shuffle);
  return ranks;
}

TEST(DistributedSamplerTest, NoSampleTwiceInAnEpochAcrossRanksAndTheTailIsDropped) {
  // 103 samples, 3 ranks x 5 = 15 per step: 6 steps fill 90 positions, 13 are dropped.
  auto ranks = Ranks(103, 3, 7);
  std::set<int64_t> seen;
  for (int step = 0; step < 6; ++step) {
    for (auto& sampler : ranks) {
      for (int64_t index : sampler.Next(5)) {
        EXPECT_GE(index, 0);
        EXPECT_LT(index, 103);
        EXPECT_TRUE(seen.insert(index).second) << "sample " << index << " twice in epoch 0";
      }
    }
  }
  EXPECT_EQ(seen.size(), 90u);
  EXPECT_EQ(ranks[0].state().epoch, 0);
  EXPECT_EQ(ranks[0].state().position, 90);
  ranks[0].Next(5);  // would need positions 90..104 of 103: a new epoch begins
  EXPECT_EQ(ranks[0].state().epoch, 1);
  EXPECT_EQ(ranks[0].state().position, 15);
}

TEST(DistributedSamplerTest, SameSeedSameSequenceOtherSeedOrEpochAnotherPermutation) {
  auto a = Ranks(50, 2, 11);
  auto b = Ranks(50, 2, 11);
  auto c = Ranks(50, 2, 12);
  const auto sequence_a = GlobalSequence(a, 5, 10);  // two epochs of 50
  EXPECT_EQ(sequence_a, GlobalSequence(b, 5, 10));
  EXPECT_NE(sequence_a, GlobalSequence(c, 5, 10));
  const std::vector<int64_t> epoch0(sequence_a.begin(), sequence_a.begin() + 50);
  const std::vector<int64_t> epoch1(sequence_a.begin() + 50, sequence_a.end());
  EXPECT_NE(epoch0, epoch1);
  EXPECT_TRUE(std::is_permutation(epoch0.begin(), epoch0.end(), epoch1.begin()));
}

TEST(DistributedSamplerTest, PermutationIsPinnedAcrossBuilds) {
  // Golden values: the permutation must not change with the compiler, library or machine, or
  // a resumed run would see other samples than the interrupted one.
  DistributedSampler sampler(10, 0, 1, 42);
  EXPECT_EQ(sampler.Next(10), (std::vector<int64_t>{7, 5, 8, 0, 9, 6, 2, 1, 4, 3}));
}

TEST(DistributedSamplerTest, WithoutShuffleRanksInterleaveInDatasetOrder) {
  auto ranks = Ranks(10, 2, 0, /*shuffle=*/false);
  EXPECT_EQ(ranks[0].Next(2), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(ranks[1].Next(2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(ranks[1].GlobalPosition(0), 1);
  EXPECT_EQ(ranks[1].GlobalPosition(1), 3);
}

TEST(DistributedSamplerTest, TwoRanksOfBatchBEqualOneRankOfBatch2B) {
  auto two = Ranks(64, 2, 5);
  auto one = Ranks(64, 1, 5);
  EXPECT_EQ(GlobalSequence(two, 4, 20), GlobalSequence(one, 8, 20));  // 2.5 epochs
}

TEST(DistributedSamplerTest, GlobalPositionIsTheSameForEveryWorldSize) {
  auto two = Ranks(40, 2, 3);
  DistributedSampler one(40, 0, 1, 3);
  for (int step = 0; step < 7; ++step) {  // crosses an epoch (40 / 6 -> 6 steps per epoch)
    const auto a = two[0].Next(3);
    const auto b = two[1].Next(3);
    const auto all = one.Next(6);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(all[2 * i], a[i]);
      EXPECT_EQ(all[2 * i + 1], b[i]);
      EXPECT_EQ(one.GlobalPosition(2 * i), two[0].GlobalPosition(i));
      EXPECT_EQ(one.GlobalPosition(2 * i + 1), two[1].GlobalPosition(i));
    }
  }
  EXPECT_EQ(one.GlobalPosition(0), 40);  // the 7th step opened epoch 1 (6 steps fit in 40)
}

TEST(DistributedSamplerTest, ResumeMidEpochFromTwoRanksToOneKeepsTheGlobalSequence) {
  auto uninterrupted = Ranks(60, 1, 9);
  const auto expected = GlobalSequence(uninterrupted, 8, 12);

  auto before = Ranks(60, 2, 9);
  auto sequence = GlobalSequence(before, 4, 5);  // 40 samples: mid-epoch
  const DistributedSampler::State saved = before[0].state();
  EXPECT_EQ(saved.position, 40);
  EXPECT_EQ(before[1].state().position, 40);  // every rank checkpoints the same state

  auto after = Ranks(60, 1, 9);
  ASSERT_TRUE(after[0].Restore(saved).ok());
  const auto rest = GlobalSequence(after, 8, 7);
  sequence.insert(sequence.end(), rest.begin(), rest.end());
  EXPECT_EQ(sequence, expected);
}

TEST(DistributedSamplerTest, ResumeMidEpochFromOneRankToTwoKeepsTheGlobalSequence) {
  auto uninterrupted = Ranks(60, 2, 9);
  const auto expected = GlobalSequence(uninterrupted, 3, 25);

  auto before = Ranks(60, 1, 9);
  auto sequence = GlobalSequence(before, 6, 13);  // 78 samples: epoch 1, position 18
  const DistributedSampler::State saved = before[0].state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.position, 18);

  auto after = Ranks(60, 2, 9);
  for (auto& sampler : after) ASSERT_TRUE(sampler.Restore(saved).ok());
  const auto rest = GlobalSequence(after, 3, 12);
  sequence.insert(sequence.end(), rest.begin(), rest.end());
  EXPECT_EQ(sequence, expected);
}

TEST(DistributedSamplerTest, RestoreRejectsAStateThatCannotBelongToTheDataset) {
  DistributedSampler sampler(10, 0, 1, 0);
  EXPECT_EQ(sampler.Restore({0, 11}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sampler.Restore({-1, 0}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sampler.Restore({3, 10}).ok());  // end of epoch 3: the next Next starts epoch 4
  sampler.Next(1);
  EXPECT_EQ(sampler.state().epoch, 4);
}

TEST(DistributedSamplerTest, AGlobalBatchLargerThanTheDatasetIsAnError) {
  EXPECT_EQ(DistributedSampler::CheckFits(10, 4, 3).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(DistributedSampler::CheckFits(12, 4, 3).ok());
  DistributedSampler sampler(10, 1, 4, 0);
  EXPECT_THROW(sampler.Next(3), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 4, 4, 0), std::invalid_argument);
}

// ---- Shape buckets -----------------------------------------------------------------------------

// 3 buckets interleaved over the dataset: index i is in bucket i % 3 for the first 45 indices,
// then 13 more of bucket 1 (bucket sizes 15, 28, 15).
std::vector<int> ThreeBuckets() {
  std::vector<int> buckets;
  for (int i = 0; i < 45; ++i) buckets.push_back(i % 3);
  for (int i = 0; i < 13; ++i) buckets.push_back(1);
  return buckets;
}

std::vector<DistributedSampler> BucketRanks(int world_size, uint64_t seed) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world_size; ++r) ranks.emplace_back(ThreeBuckets(), r, world_size, seed);
  return ranks;
}

TEST(BucketSamplerTest, EveryGlobalBatchIsOfOneBucketAndEachBucketsClipsComeOnceAnEpoch) {
  const std::vector<int> bucket_of = ThreeBuckets();
  auto ranks = BucketRanks(2, 4);
  EXPECT_EQ(ranks[0].bucket_sizes(), (std::vector<int64_t>{15, 28, 15}));
  // Global batch 6: buckets give 2 + 4 + 2 = 8 batches (48 positions); the tails are dropped.
  std::set<int64_t> seen;
  std::vector<int> step_buckets;
  for (int step = 0; step < 8; ++step) {
    const auto a = ranks[0].Next(3);
    const auto b = ranks[1].Next(3);
    EXPECT_EQ(ranks[0].last_bucket(), ranks[1].last_bucket()) << "the ranks agree, unasked";
    step_buckets.push_back(ranks[0].last_bucket());
    for (const auto& drawn : {a, b}) {
      for (int64_t index : drawn) {
        EXPECT_EQ(bucket_of[static_cast<size_t>(index)], ranks[0].last_bucket());
        EXPECT_TRUE(seen.insert(index).second) << "clip " << index << " twice in epoch 0";
      }
    }
  }
  EXPECT_EQ(seen.size(), 48u);
  EXPECT_EQ(std::count(step_buckets.begin(), step_buckets.end(), 0), 2);
  EXPECT_EQ(std::count(step_buckets.begin(), step_buckets.end(), 1), 4);
  EXPECT_EQ(std::count(step_buckets.begin(), step_buckets.end(), 2), 2);
  EXPECT_NE(step_buckets, (std::vector<int>{0, 0, 1, 1, 1, 1, 2, 2})) << "the buckets mix";
  EXPECT_EQ(ranks[0].state().position, 48);
  ranks[0].Next(3);
  EXPECT_EQ(ranks[0].state().epoch, 1);
  EXPECT_EQ(ranks[0].GlobalPosition(0), 48);  // epoch 1 starts at the epoch's length
}

TEST(BucketSamplerTest, OneRankTwoRanksAndAResumedRunDrawTheSameBatches) {
  auto one = BucketRanks(1, 8);
  const auto expected = GlobalSequence(one, 6, 20);  // 2.5 epochs of 8 batches
  auto two = BucketRanks(2, 8);
  EXPECT_EQ(GlobalSequence(two, 3, 20), expected);

  auto before = BucketRanks(2, 8);
  auto sequence = GlobalSequence(before, 3, 11);  // into epoch 1
  const DistributedSampler::State saved = before[1].state();
  auto after = BucketRanks(1, 8);
  ASSERT_TRUE(after[0].Restore(saved).ok());
  const auto rest = GlobalSequence(after, 6, 9);
  sequence.insert(sequence.end(), rest.begin(), rest.end());
  EXPECT_EQ(sequence, expected);

  auto other_seed = BucketRanks(1, 9);
  EXPECT_NE(GlobalSequence(other_seed, 6, 20), expected);
}

TEST(BucketSamplerTest, OneBucketIsThePlainRuleAndABatchTooLargeForEveryBucketIsAnError) {
  DistributedSampler plain(10, 0, 1, 42);
  DistributedSampler one_bucket(std::vector<int>(10, 0), 0, 1, 42);
  EXPECT_EQ(one_bucket.Next(10), plain.Next(10));

  EXPECT_TRUE(DistributedSampler::CheckFits({15, 28, 15}, 4, 7).ok());  // bucket 1 holds 28
  const Status too_large = DistributedSampler::CheckFits({15, 28, 15}, 4, 8);
  EXPECT_EQ(too_large.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_large.message().find("fits in none of the 3 shape buckets"), std::string::npos)
      << too_large.message();
  auto ranks = BucketRanks(4, 0);
  EXPECT_THROW(ranks[0].Next(8), std::invalid_argument);
  // A global batch of 16 fits only bucket 1: its one batch an epoch is every step's.
  for (int step = 0; step < 3; ++step) {
    ranks[0].Next(4);
    EXPECT_EQ(ranks[0].last_bucket(), 1);
    EXPECT_EQ(ranks[0].state().epoch, step);
  }
}

}  // namespace
}  // namespace adctl
