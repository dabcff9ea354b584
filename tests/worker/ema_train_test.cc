// train.ema and checkpoint.keep_best (issue 30 items 2 and 3), run by the real adworker on the
// CPU: the average is in every checkpoint (ema/, its update count in the manifest), a resumed
// run continues it exactly, eval and export can use it; keep_best keeps the checkpoints with
// the lowest eval loss.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "common/checkpoint_dir.h"
#include "common/checkpoint_export.h"
#include "common/worker_contract.h"
#include "tests/testing/worker_process.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

const std::string kTiny = std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny";

std::string ReadText(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// step -> eval loss, from a metrics file.
std::map<int64_t, double> EvalLosses(const std::string& jsonl) {
  std::map<int64_t, double> out;
  std::ifstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step" && j.value("eval_loss", -1.0) >= 0) out[j["step"]] = j["eval_loss"];
  }
  return out;
}

double MaxDifference(const TensorMap& a, const TensorMap& b) {
  double worst = 0;
  for (const auto& [k, t] : a) {
    worst = std::max(worst, (t - b.at(k)).abs().max().item<double>());
  }
  return worst;
}

class EmaTrainingTest : public WorkerRunTest {
 protected:
  // A LoRA job on the tiny fixture model (`lora`) or the tiny preset's whole motion modules.
  std::string Spec(const std::string& name, bool lora, const std::string& train_extra,
                   const std::string& extra) {
    const fs::path path = root_ / (name + ".yaml");
    std::ofstream out(path);
    out << "name: " << name << "\n";
    if (lora) {
      out << "model: {unet2d: " << kTiny << "/unet2d, motion_adapter: " << kTiny
          << "/motion_adapter, lora: {rank: 4, alpha: 8}}\n"
             "data: {kind: synthetic, num_samples: 32, frames: 4, height: 8, width: 8, "
             "text_len: 4}\n";
    } else {
      out << "model: {preset: tiny}\n"
             "data: {kind: synthetic, num_samples: 24, frames: 4, height: 8, width: 8}\n";
    }
    out << "train: {max_steps: 4, batch_size: 2, lr: 1.0e-2, seed: 3" << train_extra << "}\n"
        << "resources: {rendezvous_timeout_seconds: 20}\n"
        << extra;
    return path.string();
  }
  fs::path Checkpoint(const std::string& job, int step) {
    return root_ / job / "checkpoints" / CheckpointDirName(step);
  }
  std::set<int64_t> CheckpointSteps(const std::string& job) {
    std::set<int64_t> steps;
    auto list = ListCheckpoints((root_ / job / "checkpoints").string());
    EXPECT_TRUE(list.ok());
    for (const auto& c : *list) steps.insert(c.step);
    return steps;
  }
};

TEST_F(EmaTrainingTest, ALoraAverageIsCheckpointedAndResumesExactly) {
  const std::string spec = Spec("resume", /*lora=*/true, ", ema: {decay: 0.9}",
                                "checkpoint: {every_steps: 2, keep_last: 3}\n");
  ASSERT_EQ(Train(spec, "straight"), kExitOk) << ReadText(Log("straight"));
  ASSERT_EQ(Train(spec, "split", 0, 1, {"--set", "train.max_steps=2"}), kExitOk);
  ASSERT_EQ(Train(spec, "split"), kExitOk) << ReadText(Log("split"));
  const std::string ema_file =
      std::string(kEmaCheckpointDir) + "/" + kLoraCheckpointDir + "/" + kLoraFileName;
  auto straight = ReadTensorFile((Checkpoint("straight", 4) / ema_file).string());
  auto split = ReadTensorFile((Checkpoint("split", 4) / ema_file).string());
  auto raw =
      ReadTensorFile((Checkpoint("straight", 4) / kLoraCheckpointDir / kLoraFileName).string());
  ASSERT_TRUE(straight.ok()) << straight.status().ToString();
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  ASSERT_TRUE(raw.ok());
  ASSERT_EQ(straight->size(), raw->size()) << "an average for every adapter tensor";
  EXPECT_LE(MaxDifference(*straight, *split), 1e-6) << "the resumed run's average";
  EXPECT_GT(MaxDifference(*straight, *raw), 1e-6) << "the average lags the weights";
  auto manifest = VerifyCheckpoint(Checkpoint("split", 4).string());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  EXPECT_EQ(manifest->metadata.value(kEmaUpdatesKey, 0), 4);
}

// eval.weights and export.weights: ema evaluate and export the average, not the weights.
TEST_F(EmaTrainingTest, EvalAndExportUseTheAverage) {
  const std::string common =
      "checkpoint: {every_steps: 4, keep_last: 1}\n"
      "eval: {holdout_clips: 4, timesteps: [100, 700], every_steps: 4, seed: 1";
  ASSERT_EQ(Train(Spec("raw", false, ", ema: {decay: 0.8}", common + "}\n"), "raw"), kExitOk)
      << ReadText(Log("raw"));
  ASSERT_EQ(Train(Spec("ema", false, ", ema: {decay: 0.8}",
                       common + ", weights: ema}\nexport: {formats: [diffusers], weights: ema}\n"),
                  "ema"),
            kExitOk)
      << ReadText(Log("ema"));
  const auto raw = EvalLosses(Metrics("raw"));
  const auto ema = EvalLosses(Metrics("ema"));
  ASSERT_EQ(raw.count(4), 1u);
  ASSERT_EQ(ema.count(4), 1u);
  EXPECT_NE(raw.at(4), ema.at(4)) << "the same training, evaluated on other weights";
  // The export is the checkpoint's average.
  const fs::path exported = root_ / "ema" / "export" / (CheckpointDirName(4) + "-ema") /
                            "motion_adapter" / "diffusion_pytorch_model.safetensors";
  ASSERT_TRUE(fs::exists(exported)) << ReadText(Log("ema"));
  auto a = ReadTensorFile(exported.string());
  auto b = ReadTensorFile((Checkpoint("ema", 4) / kEmaCheckpointDir / "motion_adapter" /
                           "diffusion_pytorch_model.safetensors")
                              .string());
  ASSERT_TRUE(a.ok() && b.ok());
  int compared = 0;
  for (const auto& [k, t] : *a) {
    if (!b->count(k)) continue;
    EXPECT_TRUE(torch::equal(t, b->at(k))) << k;
    ++compared;
  }
  EXPECT_GT(compared, 10) << "the export's tensors are the average's";
}

TEST_F(EmaTrainingTest, KeepBestKeepsTheCheckpointsWithTheLowestEvalLoss) {
  const std::string spec =
      Spec("best", false, "",
           "checkpoint: {every_steps: 0, keep_last: 1, keep_best: {metric: eval_loss, k: 2}}\n"
           "eval: {holdout_clips: 4, timesteps: [300], every_steps: 1, seed: 2}\n");
  ASSERT_EQ(Train(spec, "best", 0, 1, {"--set", "train.max_steps=6"}), kExitOk)
      << ReadText(Log("best"));
  const auto losses = EvalLosses(Metrics("best"));
  ASSERT_EQ(losses.size(), 6u);
  std::vector<std::pair<double, int64_t>> ranked;
  for (const auto& [step, loss] : losses) ranked.emplace_back(loss, step);
  std::sort(ranked.begin(), ranked.end());
  const std::set<int64_t> expected = {ranked[0].second, ranked[1].second, 6};
  EXPECT_EQ(CheckpointSteps("best"), expected);
  for (int64_t step : expected) {
    auto m = VerifyCheckpoint(Checkpoint("best", static_cast<int>(step)).string());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_DOUBLE_EQ(m->metadata.value("eval_loss", -1.0), losses.at(step)) << step;
  }
}

}  // namespace
}  // namespace adctl
