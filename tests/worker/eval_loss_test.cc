// Eval loss on held-out clips (issue 30 item 1), run by the real adworker on the CPU: held-out
// clips are never drawn for training, and the number depends only on the weights: the same on 1
// and 2 ranks and after a resume.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/worker_contract.h"
#include "tests/testing/worker_process.h"
#include "worker/data/sampler.h"
#include "worker/train/evaluator.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

std::string ReadText(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// step -> the `step` event of a metrics file that carries an eval loss.
std::map<int64_t, nlohmann::json> EvalPoints(const std::string& jsonl) {
  std::map<int64_t, nlohmann::json> out;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step" && j.value("eval_loss", -1.0) >= 0) out[j["step"]] = j;
  }
  return out;
}

TEST(HoldoutTest, HeldOutClipsAreNeverDrawnForTraining) {
  const HoldoutSplit split = SplitHoldout(40, 6, /*seed=*/9);
  ASSERT_EQ(split.eval.size(), 6u);
  ASSERT_EQ(split.train.size(), 34u);
  EXPECT_EQ(SplitHoldout(40, 6, 9).eval, split.eval) << "the same clips every time";
  EXPECT_NE(SplitHoldout(40, 6, 10).eval, split.eval) << "eval.seed chooses them";
  const std::set<int64_t> held(split.eval.begin(), split.eval.end());
  // A whole epoch (and a bit) of training draws on 2 ranks, mapped to dataset clips.
  for (int rank = 0; rank < 2; ++rank) {
    DistributedSampler sampler(static_cast<int64_t>(split.train.size()), rank, 2, /*seed=*/3);
    std::set<int64_t> seen;
    for (int b = 0; b < 3 * 17; ++b) {  // three epochs
      for (int64_t i : sampler.Next(1)) {
        const int64_t clip = split.train.at(i);
        EXPECT_FALSE(held.count(clip)) << "held-out clip " << clip << " drawn for training";
        if (b < 17) seen.insert(clip);
      }
    }
    EXPECT_EQ(seen.size(), 17u);  // rank r's half of the first epoch: every one different
  }
}

class EvalLossTest : public WorkerRunTest {
 protected:
  std::string Spec(const std::string& name, double lr) {
    const fs::path path = root_ / (name + ".yaml");
    std::ofstream(path) << "name: " << name
                        << "\nmodel: {preset: tiny}\n"
                           "data: {kind: synthetic, num_samples: 24, frames: 4, height: 8, "
                           "width: 8}\n"
                           "train: {max_steps: 4, batch_size: 2, seed: 3, lr: "
                        << lr
                        << "}\n"
                           "checkpoint: {every_steps: 2, keep_last: 3}\n"
                           "eval: {holdout_clips: 5, timesteps: [50, 500, 950], every_steps: 2, "
                           "seed: 7}\n"
                           "resources: {rendezvous_timeout_seconds: 20}\n";
    return path.string();
  }
};

// The weights do not move (lr 1e-30): 1 rank and 2 ranks evaluate the same weights, and must agree
// to float precision, per timestep and overall.
TEST_F(EvalLossTest, TheSameWeightsGiveTheSameEvalLossOnOneAndTwoRanks) {
  const std::string spec = Spec("ranks", 1e-30);  // moves no fp32 weight
  ASSERT_EQ(Train(spec, "one"), kExitOk) << ReadText(Log("one"));
  const pid_t r0 = Start(spec, "two", 0, 2, {"--set", "train.batch_size=1"});
  const pid_t r1 = Start(spec, "two", 1, 2, {"--set", "train.batch_size=1"});
  ASSERT_EQ(WaitFor(r0, std::chrono::seconds(240)), kExitOk) << ReadText(Log("two", 0));
  ASSERT_EQ(WaitFor(r1, std::chrono::seconds(60)), kExitOk) << ReadText(Log("two", 1));
  const auto one = EvalPoints(Metrics("one"));
  const auto two = EvalPoints(Metrics("two"));
  ASSERT_EQ(one.size(), 2u) << "eval at steps 2 and 4";
  ASSERT_EQ(two.size(), 2u);
  for (const auto& [step, point] : one) {
    const double a = point["eval_loss"], b = two.at(step)["eval_loss"];
    EXPECT_GT(a, 0);
    EXPECT_LE(std::abs(a - b), 1e-6 * a) << "step " << step;
    const auto& ta = point["eval_by_timestep"];
    const auto& tb = two.at(step)["eval_by_timestep"];
    ASSERT_EQ(ta.size(), 3u) << point.dump();
    ASSERT_EQ(tb.size(), 3u);
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(ta[j][0], tb[j][0]);
      EXPECT_LE(std::abs(ta[j][1].get<double>() - tb[j][1].get<double>()),
                1e-6 * ta[j][1].get<double>());
    }
    // Low-noise timesteps are easier to denoise than the noisiest: not one number three times.
    EXPECT_NE(ta[0][1].get<double>(), ta[2][1].get<double>());
  }
}

TEST_F(EvalLossTest, AResumedRunGivesTheSameEvalLoss) {
  const std::string spec = Spec("resume", 1e-2);
  ASSERT_EQ(Train(spec, "straight"), kExitOk) << ReadText(Log("straight"));
  ASSERT_EQ(Train(spec, "split", 0, 1, {"--set", "train.max_steps=2"}), kExitOk);
  ASSERT_EQ(Train(spec, "split"), kExitOk) << ReadText(Log("split"));
  const auto straight = EvalPoints(Metrics("straight"));
  const auto resumed = EvalPoints(Metrics("split"));
  ASSERT_EQ(straight.size(), 2u);
  ASSERT_EQ(resumed.count(4), 1u);
  const double a = straight.at(4)["eval_loss"], b = resumed.at(4)["eval_loss"];
  EXPECT_LE(std::abs(a - b), 1e-6 * a);
  // Training moved the weights, so the eval loss moved too.
  EXPECT_NE(straight.at(2)["eval_loss"].get<double>(), a);
}

}  // namespace
}  // namespace adctl
