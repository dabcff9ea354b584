// Weighted and repeated mixes of latent caches (data.sources, issue 32 item 3), driven by the
// real sampler as the batch loader drives it: each source's share of the draws follows its
// weight, every clip of a source is drawn once before any twice, 1 and 2 ranks and a resumed
// run draw the same clips, and the eval hold-out comes from every source.
#include "worker/data/sources.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/testing/temp_dir.h"
#include "worker/data/sampler.h"

namespace adctl {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kChannels = 4;
constexpr int64_t kTextDim = 8;

std::shared_ptr<const LatentDataset> Synthetic(int64_t clips, int64_t seed, int64_t frames = 4,
                                               int64_t text_len = 2) {
  DataSpec d;
  d.num_samples = clips;
  d.seed = seed;
  d.frames = frames;
  d.height = d.width = 4;
  d.text_len = text_len;
  auto opened = OpenLatentDataset(d, kChannels, kTextDim);
  EXPECT_TRUE(opened.ok());
  return std::move(*opened);
}

std::unique_ptr<SourceMix> Mix(std::vector<SourceMix::Source> sources, uint64_t seed = 5) {
  auto mix = SourceMix::Create(std::move(sources), seed);
  EXPECT_TRUE(mix.ok()) << mix.status().ToString();
  return std::move(*mix);
}

// (source, clip) of every draw `world` ranks taking `count` each make in `steps` steps, in
// global-position order, with the epoch the batch loader gives each (its position / the mix's
// size). `resume_at` > 0: the ranks stop after that many steps and new ones continue from the
// saved sampler state, as a resumed run does.
std::vector<std::pair<size_t, int64_t>> Draws(const SourceMix& mix, int world, int64_t count,
                                              int steps, int resume_at = 0) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(mix.size(), r, world, /*seed=*/11);
  std::vector<std::pair<size_t, int64_t>> out;
  for (int step = 0; step < steps; ++step) {
    if (resume_at > 0 && step == resume_at) {
      const DistributedSampler::State saved = ranks[0].state();
      ranks.clear();
      for (int r = 0; r < world; ++r) {
        ranks.emplace_back(mix.size(), r, world, /*seed=*/11);
        EXPECT_TRUE(ranks.back().Restore(saved).ok());
      }
    }
    std::vector<std::vector<std::pair<size_t, int64_t>>> drawn(world);
    for (int r = 0; r < world; ++r) {
      const auto indices = ranks[r].Next(count);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t epoch = ranks[r].GlobalPosition(i) / mix.size();
        const SourceMix::Place p = mix.Locate(indices[i], epoch);
        drawn[r].emplace_back(p.source, p.clip);
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      for (int r = 0; r < world; ++r) out.push_back(drawn[r][i]);
    }
  }
  return out;
}

double Share(const std::vector<std::pair<size_t, int64_t>>& draws, size_t source) {
  int64_t n = 0;
  for (const auto& d : draws) n += d.first == source;
  return static_cast<double>(n) / static_cast<double>(draws.size());
}

TEST(SourceMixTest, EachSourceGetsItsWeightsShareOfTheDraws) {
  // 3:1 over sources of 30 and 10 clips: 40,000 draws, 75 % from the first.
  auto mix = Mix({{Synthetic(30, 1), "/a", 3, 0}, {Synthetic(10, 2), "/b", 1, 0}});
  EXPECT_EQ(mix->size(), SourceMix::kMinWeightedSlots);
  const auto draws = Draws(*mix, 1, 8, 5000);
  ASSERT_EQ(draws.size(), 40000u);
  EXPECT_NEAR(Share(draws, 0), 0.75, 0.01);
  // The weight, not the size: 1:1 over the same sources is half each.
  auto even = Mix({{Synthetic(30, 1), "/a", 1, 0}, {Synthetic(10, 2), "/b", 1, 0}});
  EXPECT_NEAR(Share(Draws(*even, 1, 8, 5000), 0), 0.5, 0.01);
  EXPECT_THAT(mix->Describe(), HasSubstr("/a (30 clips, weight 3: 75.0 % of the draws)"));

  // Repeats: passes over a source's clips an epoch; 30 clips once and 10 clips three times is
  // half each, exactly, epoch by epoch (60 slots, 15 steps of 4).
  auto repeated = Mix({{Synthetic(30, 1), "/a", 0, 0}, {Synthetic(10, 2), "/b", 0, 3}});
  EXPECT_EQ(repeated->size(), 60);
  const auto epoch = Draws(*repeated, 1, 4, 15);
  EXPECT_EQ(Share(epoch, 0), 0.5);
  std::map<int64_t, int> times;
  for (const auto& [source, clip] : epoch) {
    if (source == 1) ++times[clip];
  }
  ASSERT_EQ(times.size(), 10u);
  for (const auto& [clip, n] : times) EXPECT_EQ(n, 3) << "clip " << clip;
}

TEST(SourceMixTest, EverySourceDrawsAllItsClipsBeforeAnyTwice) {
  // 1:99 over two sources of 50 clips: the small share (10 slots an epoch) still walks through
  // all 50 clips, one permutation after another; the large one (990) through 19.8 rounds.
  auto mix = Mix({{Synthetic(50, 1), "/rare", 1, 0}, {Synthetic(50, 2), "/common", 99, 0}});
  ASSERT_EQ(mix->slots(0), 10);
  for (size_t source = 0; source < 2; ++source) {
    std::vector<int64_t> run;  // the source's clips in the order of its draws c = 0, 1, ...
    const int64_t first = source == 0 ? 0 : mix->slots(0);
    for (int64_t epoch = 0; epoch < 10; ++epoch) {
      for (int64_t k = 0; k < mix->slots(source); ++k) {
        const SourceMix::Place p = mix->Locate(first + k, epoch);
        ASSERT_EQ(p.source, source);
        run.push_back(p.clip);
      }
    }
    for (size_t round = 0; (round + 1) * 50 <= run.size(); ++round) {
      const std::set<int64_t> clips(run.begin() + round * 50, run.begin() + (round + 1) * 50);
      EXPECT_EQ(clips.size(), 50u) << "source " << source << " round " << round;
    }
  }
  // Rounds are shuffled anew: the second pass is not the first again.
  EXPECT_NE(mix->Locate(0, 0).clip * 1000 + mix->Locate(1, 0).clip,
            mix->Locate(0, 5).clip * 1000 + mix->Locate(1, 5).clip);
}

TEST(SourceMixTest, OneAndTwoRanksAndAResumedRunDrawTheSameClips) {
  auto mix = Mix({{Synthetic(30, 1), "/a", 3, 0},
                  {Synthetic(10, 2), "/b", 1, 0},
                  {Synthetic(7, 3), "/c", 0.5, 0}});
  // 1,000 slots, 8 a step: 300 steps cross two epoch boundaries.
  const auto one = Draws(*mix, 1, 8, 300);
  EXPECT_EQ(Draws(*mix, 2, 4, 300), one);
  EXPECT_EQ(Draws(*mix, 1, 8, 300, /*resume_at=*/137), one);
  EXPECT_EQ(Draws(*mix, 2, 4, 300, /*resume_at=*/200), one);
  // The draw itself (latent sample, caption) is the source's, from the caller's generator.
  auto gen_a = at::detail::createCPUGenerator(42);
  auto gen_b = at::detail::createCPUGenerator(42);
  const SourceMix::Place p = mix->Locate(999, 2);
  const auto& source = p.source == 0   ? Synthetic(30, 1)
                       : p.source == 1 ? Synthetic(10, 2)
                                       : Synthetic(7, 3);
  EXPECT_TRUE(
      torch::equal(mix->DrawAt(999, 2, gen_a, 0).latents, source->Draw(p.clip, gen_b, 0).latents));
}

TEST(SourceMixTest, SourcesOfAnotherFrameCountAreShapeBucketsOfTheirOwn) {
  auto mix = Mix({{Synthetic(10, 1), "/a", 0, 1},
                  {Synthetic(10, 2, 8), "/b", 0, 2},
                  {Synthetic(5, 3), "/c", 0, 1}});
  ASSERT_EQ(mix->buckets(), 2);
  EXPECT_EQ(mix->bucket_shape(0).frames, 4);
  EXPECT_EQ(mix->bucket_shape(1).frames, 8);
  // Slots [0, 10) are /a's, [10, 30) /b's, [30, 35) /c's: /a and /c share a bucket.
  for (int64_t i = 0; i < mix->size(); ++i) {
    EXPECT_EQ(mix->bucket(i), i >= 10 && i < 30 ? 1 : 0) << "slot " << i;
    auto gen = at::detail::createCPUGenerator(0);
    for (int64_t epoch = 0; epoch < 3; ++epoch) {  // a slot's clip changes, its shape does not
      EXPECT_EQ(mix->DrawAt(i, epoch, gen, 0).latents.size(1),
                mix->bucket_shape(mix->bucket(i)).frames);
    }
  }
  EXPECT_THAT(mix->Describe(), HasSubstr("/b (10 clips of 8x4x4, repeats 2: 57.1 % of the draws)"));
  EXPECT_EQ(ClipBuckets(*mix).size(), 35u);

  // The eval hold-out of such a mix keeps each clip's bucket.
  ConcatDataset held(
      {std::make_shared<SubsetDataset>(Synthetic(10, 2, 8), std::vector<int64_t>{3}),
       std::make_shared<SubsetDataset>(Synthetic(10, 1), std::vector<int64_t>{1, 2})});
  ASSERT_EQ(held.buckets(), 2);
  EXPECT_EQ(held.bucket(0), 0);
  EXPECT_EQ(held.bucket(2), 1);
  EXPECT_EQ(held.bucket_shape(0).frames, 8);
}

// A source of several shapes (a cache made with preprocess.buckets) enters a mix as one source
// a bucket: each with the source's repeats, or its weight shared by the buckets' clips.
TEST(SourceMixTest, ASourceOfSeveralShapesIsOneSourceABucket) {
  const auto bucketed = std::make_shared<ConcatDataset>(
      std::vector<std::shared_ptr<const LatentDataset>>{Synthetic(30, 1), Synthetic(10, 2, 8)});
  ASSERT_EQ(bucketed->buckets(), 2);
  auto weighted = Mix({{bucketed, "/b", 4, 0}, {Synthetic(40, 3), "/c", 4, 0}});
  ASSERT_EQ(weighted->sources(), 3u);
  ASSERT_EQ(weighted->buckets(), 2);
  // /b's weight 4 split 3:1 by its buckets' clips; /c keeps 4: 37.5 %, 12.5 %, 50 %.
  EXPECT_EQ(weighted->slots(0), 375);
  EXPECT_EQ(weighted->slots(1), 125);
  EXPECT_EQ(weighted->slots(2), 500);
  EXPECT_THAT(weighted->Describe(), HasSubstr("/b [4x4x4] (30 clips of 4x4x4, weight 3:"));
  EXPECT_THAT(weighted->Describe(), HasSubstr("/b [8x4x4] (10 clips of 8x4x4, weight 1:"));
  auto gen = at::detail::createCPUGenerator(0);
  for (int64_t i = 0; i < weighted->size(); i += 7) {
    const int b = weighted->bucket(i);
    EXPECT_EQ(b, i >= 375 && i < 500 ? 1 : 0) << "slot " << i;
    EXPECT_EQ(weighted->DrawAt(i, 1, gen, 0).latents.size(1), weighted->bucket_shape(b).frames);
  }
  // Each bucket's slots walk through that bucket's clips only: all 10 8-frame clips, each once
  // per round.
  std::map<float, int> eight;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    for (int64_t i = 375; i < 500; ++i) {
      ++eight[weighted->DrawAt(i, epoch, gen, 0).latents.sum().item<float>()];
    }
  }
  EXPECT_EQ(eight.size(), 10u);
  for (const auto& [sum, n] : eight) EXPECT_EQ(n, 50) << sum;

  auto repeated = Mix({{bucketed, "/b", 0, 2}, {Synthetic(5, 3), "/c", 0, 1}});
  ASSERT_EQ(repeated->sources(), 3u);
  EXPECT_EQ(repeated->slots(0), 60);
  EXPECT_EQ(repeated->slots(1), 20);
  EXPECT_EQ(repeated->slots(2), 5);
}

TEST(SourceMixTest, SourcesOfAnotherTextShapeAreRefused) {
  auto mix =
      SourceMix::Create({{Synthetic(10, 1), "/a", 1, 0}, {Synthetic(10, 2, 8, 3), "/b", 1, 0}}, 0);
  ASSERT_FALSE(mix.ok());
  EXPECT_THAT(mix.status().message(),
              HasSubstr("data.sources[1]: /b holds clips of latents [4, 8, 4, 4], text [3, 8], "
                        "data.sources[0] (/a) latents [4, 4, 4, 4], text [2, 8]"));
}

class OpenTrainingDataTest : public ::testing::Test {
 protected:
  // A directory of latent shards holding `clips` synthetic clips.
  std::string Shards(const std::string& name, int64_t clips, int64_t seed) {
    DataSpec d;
    d.num_samples = clips;
    d.seed = seed;
    d.frames = 4;
    d.height = d.width = 4;
    d.text_len = 2;
    const std::string dir = root_.file(name);
    EXPECT_TRUE(WriteSyntheticShards(d, kChannels, kTextDim, dir, 8).ok());
    return dir;
  }
  const TempDir root_;
};

TEST_F(OpenTrainingDataTest, TheHoldOutComesFromEverySourceAndIsNeverDrawn) {
  JobSpec spec;
  spec.data.kind = DataKind::kLatents;
  spec.data.sources = {{Shards("a", 30, 1), 3, 0}, {Shards("b", 10, 2), 1, 0}};
  spec.eval.holdout_clips = 8;
  bool spec_error = true;
  auto data = OpenTrainingData(spec, kChannels, kTextDim, &spec_error);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_FALSE(spec_error);
  ASSERT_TRUE(data->eval);
  EXPECT_EQ(data->eval->size(), 8);  // 6 of a's 30 clips, 2 of b's 10
  EXPECT_THAT(data->description, HasSubstr("(24 clips, weight 3: 75.0 % of the draws)"));
  EXPECT_THAT(data->description, HasSubstr("(8 clips, weight 1: 25.0 % of the draws)"));
  // A clip is known by its latents' sum: the held-out ones never come up in training, and
  // training plus hold-out is every clip of both sources.
  std::set<float> held, trained;
  for (int64_t i = 0; i < data->eval->size(); ++i) {
    held.insert(data->eval->Get(i).latents.sum().item<float>());
  }
  const auto* mix = dynamic_cast<const SourceMix*>(data->train.get());
  ASSERT_NE(mix, nullptr);
  auto gen = at::detail::createCPUGenerator(0);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t i = 0; i < mix->size(); ++i) {
      trained.insert(data->train->DrawAt(i, epoch, gen, 0).latents.sum().item<float>());
    }
  }
  for (float h : held) EXPECT_EQ(trained.count(h), 0u);
  EXPECT_EQ(held.size() + trained.size(), 40u);

  // A hold-out that would take a whole source is refused, naming it.
  spec.eval.holdout_clips = 39;  // 29 of a's, and all 10 of b's
  auto too_many = OpenTrainingData(spec, kChannels, kTextDim, &spec_error);
  ASSERT_FALSE(too_many.ok());
  EXPECT_TRUE(spec_error);
  EXPECT_THAT(too_many.status().message(), HasSubstr("takes all 10 clips of data.sources[1]"));
  // A missing cache is the data's problem, named by its field.
  spec.eval.holdout_clips = 0;
  spec.data.sources[1].path = root_.file("missing");
  auto missing = OpenTrainingData(spec, kChannels, kTextDim, &spec_error);
  ASSERT_FALSE(missing.ok());
  EXPECT_FALSE(spec_error);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("data.sources[1]: " + spec.data.sources[1].path));
}

}  // namespace
}  // namespace adctl
