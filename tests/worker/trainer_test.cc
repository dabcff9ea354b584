// The training engine end to end on the CPU: tiny preset, synthetic clips, real checkpoints.
#include "worker/train/trainer.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "common/checkpoint_dir.h"
#include "common/fs_util.h"
#include "common/job_spec.h"
#include "common/worker_contract.h"
#include "tests/testing/temp_dir.h"
#include "worker/data/latent_dataset.h"
#include "worker/data/sampler.h"
#include "worker/model/config.h"
#include "worker/model/motion_module.h"
#include "worker/model/weights.h"
#include "worker/train/attention_warmup.h"
#include "worker/train/checkpoint_saver.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

// Records what the trainer reports; can ask it to stop after a given step (as a pause would).
class RecordingReporter : public Reporter {
 public:
  void OnTrainingStarted(int64_t resumed_from_step, int64_t) override {
    resumed_from = resumed_from_step;
  }
  void OnStep(const StepReport& r) override {
    std::lock_guard<std::mutex> lock(mu);
    losses[r.step] = r.loss;
    learning_rates[r.step] = r.learning_rate;
    buckets[r.step] = r.bucket;
    if (stop_after > 0 && r.step >= stop_after) stop = true;
  }
  void OnCheckpoint(const CheckpointReport& r) override { checkpoints.push_back(r); }
  void OnEvent(EventLevel, const std::string& m) override { events.push_back(m); }
  bool StopRequested() override { return stop; }

  std::mutex mu;
  std::map<int64_t, double> losses;
  std::map<int64_t, double> learning_rates;
  std::map<int64_t, int64_t> buckets;
  std::vector<CheckpointReport> checkpoints;
  std::vector<std::string> events;
  int64_t resumed_from = -1;
  int64_t stop_after = 0;
  std::atomic<bool> stop{false};
};

class TrainerTest : public ::testing::Test {
 protected:
  JobSpec Spec(const std::vector<std::string>& overrides = {}) {
    const std::string yaml =
        "name: t\nmodel: {preset: tiny}\n"
        "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8, text_len: 4}\n"
        "train: {max_steps: 6, batch_size: 2, lr: 1.0e-3, seed: 7}\n"
        "checkpoint: {every_steps: 2, keep_last: 2}\n";
    auto spec = ParseJobSpec(yaml, overrides);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    return *spec;
  }

  int Train(const JobSpec& spec, const std::string& dir, RecordingReporter* rep) {
    TrainerOptions o;
    o.spec = spec;
    o.job_dir = (root_ / dir).string();
    o.reporter = rep;
    return RunTrainer(o);
  }

  // Pauses a run of `spec` after step 3, resumes it, and expects the resumed steps on the loss
  // curve of `full` (the uninterrupted run).
  void ExpectResumeAfterStep3OnTheCurveOf(const JobSpec& spec, const RecordingReporter& full) {
    RecordingReporter first, second;
    first.stop_after = 3;
    ASSERT_EQ(Train(spec, "resumed", &first), kExitStopped);
    ASSERT_EQ(Train(spec, "resumed", &second), kExitOk);
    ASSERT_EQ(second.losses.size(), static_cast<size_t>(spec.train.max_steps - 3));
    for (const auto& [step, loss] : second.losses) {
      EXPECT_NEAR(loss, full.losses.at(step), 1e-6 * std::max(1.0, std::abs(loss)))
          << "step " << step;
    }
  }

  const TempDir tmp_;  // first: removed after everything that uses it
  const fs::path root_{tmp_.path()};
};

TEST_F(TrainerTest, TrainsAndWritesALoadableCheckpoint) {
  RecordingReporter rep;
  ASSERT_EQ(Train(Spec(), "a", &rep), kExitOk) << (rep.events.empty() ? "" : rep.events.back());
  ASSERT_EQ(rep.losses.size(), 6u);
  for (const auto& [step, loss] : rep.losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  // The start-up report says where the time to the first step went, phase by phase in order.
  const auto startup = std::find_if(rep.events.begin(), rep.events.end(),
                                    [](const auto& e) { return e.rfind("start-up: ", 0) == 0; });
  ASSERT_NE(startup, rep.events.end());
  size_t at = 0;
  for (const char* phase : {"exec and libraries", "CUDA context", "model", "optimizer and resume",
                            "first forward", "first backward", "rest of the first step"}) {
    const size_t found = startup->find(phase, at);
    ASSERT_NE(found, std::string::npos) << phase << " in " << *startup;
    at = found;
  }
  // Every checkpoint written in the background is reported, in order, once committed.
  ASSERT_EQ(rep.checkpoints.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rep.checkpoints[i].step, 2 * static_cast<int64_t>(i + 1));
    EXPECT_GT(rep.checkpoints[i].size_bytes, 0);
  }
  // keep_last 2: steps 4 and 6 remain, both verify.
  auto list = ListCheckpoints((root_ / "a/checkpoints").string());
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].step, 6);
  ASSERT_TRUE(VerifyCheckpoint((*list)[1].path).ok());
  // The adapter loads back onto the materialised preset UNet as a diffusers pair.
  ModelSources src;
  src.unet2d = (root_ / "a/model/unet2d").string();
  src.motion_adapter = (*list)[1].path + "/motion_adapter";
  auto loaded = LoadUNet3D(src, MotionNorm::kAuto);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(loaded->motion_loaded);
}

// model.motion_max_frames: clips longer than the tiny preset's 32-position tables train on the
// stretched tables, which the checkpoint keeps (its config says so) and a resume rebuilds.
TEST_F(TrainerTest, StretchedPositionTablesTrainLongerClipsAndResume) {
  const std::vector<std::string> longer = {"data.frames=40", "model.motion_max_frames=40",
                                           "data.height=4", "data.width=4"};
  RecordingReporter first;
  first.stop_after = 1;
  ASSERT_EQ(Train(Spec(longer), "long", &first), kExitStopped)
      << (first.events.empty() ? "" : first.events.back());
  EXPECT_NE(std::find(first.events.begin(), first.events.end(),
                      "motion modules' positional tables interpolated from 32 to 40 positions "
                      "(model.motion_max_frames)"),
            first.events.end());
  RecordingReporter second;
  ASSERT_EQ(Train(Spec(longer), "long", &second), kExitOk)
      << (second.events.empty() ? "" : second.events.back());
  EXPECT_EQ(second.resumed_from, 1);
  for (const auto& [step, loss] : second.losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  auto list = ListCheckpoints((root_ / "long/checkpoints").string());
  ASSERT_TRUE(list.ok() && !list->empty());
  const std::string adapter = list->back().path + "/motion_adapter";
  auto config = ReadTextFile(adapter + "/config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_NE(config->find("\"motion_max_seq_length\": 40"), std::string::npos) << *config;
  auto tensors = ReadTensorFile(adapter + "/diffusion_pytorch_model.safetensors");
  ASSERT_TRUE(tensors.ok());
  const auto& pe = tensors->at("down_blocks.0.motion_modules.0.transformer_blocks.0.pos_embed.pe");
  ASSERT_EQ(pe.size(1), 40);
  EXPECT_TRUE(torch::allclose(
      pe, InterpolatePositionTable(SinusoidalPositionTable(32, pe.size(2)), 40), 1e-6, 1e-6));

  // Without it the same clips are refused, naming the field that extends the table.
  EXPECT_NE(ParseJobSpec("name: t\nmodel: {preset: tiny}\ndata: {frames: 40}\n", {})
                .status()
                .message()
                .find("model.motion_max_frames extends"),
            std::string::npos);
}

TEST_F(TrainerTest, SameSeedGivesTheSameLossCurve) {
  RecordingReporter a, b;
  ASSERT_EQ(Train(Spec(), "a", &a), kExitOk);
  ASSERT_EQ(Train(Spec(), "b", &b), kExitOk);
  EXPECT_EQ(a.losses, b.losses);
  RecordingReporter c;
  ASSERT_EQ(Train(Spec({"train.seed=8"}), "c", &c), kExitOk);
  EXPECT_NE(a.losses, c.losses);
}

TEST_F(TrainerTest, ResumeContinuesTheUninterruptedLossCurve) {
  RecordingReporter full;
  ASSERT_EQ(Train(Spec(), "full", &full), kExitOk);

  RecordingReporter first;
  first.stop_after = 3;  // like a pause after step 3: checkpoint, exit 75
  ASSERT_EQ(Train(Spec(), "resumed", &first), kExitStopped);
  EXPECT_EQ(first.losses.size(), 3u);
  RecordingReporter second;
  ASSERT_EQ(Train(Spec(), "resumed", &second), kExitOk);
  EXPECT_EQ(second.resumed_from, 3);
  ASSERT_EQ(second.losses.size(), 3u);
  for (const auto& [step, loss] : second.losses) {
    EXPECT_NEAR(loss, full.losses.at(step), 1e-6 * std::max(1.0, std::abs(loss)))
        << "step " << step;
  }
  auto a = ReadTensorFile(
      (root_ / "full/checkpoints/step-00000006/motion_adapter/diffusion_pytorch_model.safetensors")
          .string());
  auto b = ReadTensorFile(
      (root_ /
       "resumed/checkpoints/step-00000006/motion_adapter/diffusion_pytorch_model.safetensors")
          .string());
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& [k, t] : *a) EXPECT_TRUE(torch::allclose(t, b->at(k), 1e-5, 1e-6)) << k;
}

TEST_F(TrainerTest, GradientAccumulationEqualsTheLargerBatch) {
  RecordingReporter big, accumulated;
  ASSERT_EQ(Train(Spec({"train.max_steps=3"}), "big", &big), kExitOk);
  ASSERT_EQ(Train(Spec({"train.max_steps=3", "train.batch_size=1", "train.grad_accum=2"}), "acc",
                  &accumulated),
            kExitOk);
  for (const auto& [step, loss] : big.losses) {
    EXPECT_NEAR(accumulated.losses.at(step), loss, 1e-5) << step;
  }
}

TEST_F(TrainerTest, LatentShardsTrainLikeTheSyntheticSource) {
  auto spec = Spec({"train.max_steps=2"});
  ASSERT_TRUE(WriteSyntheticShards(spec.data, 4, 32, (root_ / "shards").string(), 5).ok());
  RecordingReporter synthetic, shards;
  ASSERT_EQ(Train(spec, "s1", &synthetic), kExitOk);
  spec.data.kind = DataKind::kLatents;
  spec.data.path = (root_ / "shards").string();
  ASSERT_EQ(Train(spec, "s2", &shards), kExitOk);
  EXPECT_EQ(synthetic.losses, shards.losses);
}

// data.sources (issue 32 item 3): a weighted mix of two caches trains, says how it mixes, and a
// paused run resumes on the same loss curve; caches of another shape are a bad spec.
TEST_F(TrainerTest, AWeightedMixOfCachesResumesOnTheSameLossCurve) {
  auto spec = Spec();
  auto other = spec.data;
  other.seed = 5;
  other.num_samples = 8;
  ASSERT_TRUE(WriteSyntheticShards(spec.data, 4, 32, (root_ / "a").string(), 5).ok());
  ASSERT_TRUE(WriteSyntheticShards(other, 4, 32, (root_ / "b").string(), 5).ok());
  spec.data.kind = DataKind::kLatents;
  spec.data.sources = {{(root_ / "a").string(), 3, 0}, {(root_ / "b").string(), 1, 0}};
  RecordingReporter full;
  ASSERT_EQ(Train(spec, "full", &full), kExitOk) << (full.events.empty() ? "" : full.events.back());
  EXPECT_NE(std::find_if(full.events.begin(), full.events.end(),
                         [](const auto& e) {
                           return e.find("data: 2 sources mixed, 1000 draws an epoch") == 0;
                         }),
            full.events.end());
  ExpectResumeAfterStep3OnTheCurveOf(spec, full);
  // Other text states in the second cache: refused before training, naming the source.
  other.text_len = 6;
  ASSERT_TRUE(WriteSyntheticShards(other, 4, 32, (root_ / "c").string(), 5).ok());
  spec.data.sources[1].path = (root_ / "c").string();
  RecordingReporter bad;
  EXPECT_EQ(Train(spec, "bad", &bad), kExitBadSpec);
  ASSERT_FALSE(bad.events.empty());
  EXPECT_NE(bad.events.back().find("data.sources[1]: " + spec.data.sources[1].path +
                                   " holds clips of latents [4, 4, 8, 8], text [6, 32]"),
            std::string::npos)
      << bad.events.back();
}

// Shape buckets (issue 32 item 4): caches of other frame counts and latent sizes are buckets of
// one run. Every batch is of one bucket, the start-up says which buckets there are, a paused run
// resumes on the same loss curve, and a batch too large for every bucket is a bad spec.
TEST_F(TrainerTest, CachesOfSeveralShapesTrainAsBucketsAndResumeOnTheSameLossCurve) {
  auto spec = Spec({"train.max_steps=8"});
  auto longer = spec.data;
  longer.seed = 5;
  longer.num_samples = 10;
  longer.frames = 6;
  auto wider = spec.data;
  wider.seed = 6;
  wider.num_samples = 3;  // one batch of 2 an epoch, its third clip dropped
  wider.width = 16;
  ASSERT_TRUE(WriteSyntheticShards(spec.data, 4, 32, (root_ / "a").string(), 5).ok());
  ASSERT_TRUE(WriteSyntheticShards(longer, 4, 32, (root_ / "b").string(), 5).ok());
  ASSERT_TRUE(WriteSyntheticShards(wider, 4, 32, (root_ / "c").string(), 5).ok());
  spec.data.kind = DataKind::kLatents;
  spec.data.sources = {{(root_ / "a").string(), 0, 1},
                       {(root_ / "b").string(), 0, 1},
                       {(root_ / "c").string(), 0, 1}};
  RecordingReporter full;
  ASSERT_EQ(Train(spec, "full", &full), kExitOk) << (full.events.empty() ? "" : full.events.back());
  const auto said = [&](const RecordingReporter& r, const std::string& what) {
    return std::any_of(r.events.begin(), r.events.end(),
                       [&](const auto& e) { return e.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(said(full,
                   "data: 3 shape buckets (frames x latent height x width), each batch of "
                   "one: 4x8x8 (16 clips, 8 global batches an epoch), 6x8x8 (10 clips, 5 "
                   "global batches an epoch), 4x8x16 (3 clips, 1 global batches an epoch)"));
  EXPECT_EQ(full.losses.size(), 8u);
  for (const auto& [step, loss] : full.losses) EXPECT_TRUE(std::isfinite(loss)) << step;
  // Each step's report names its bucket; 8 steps of an epoch of 14 batches meet more than one.
  std::set<int64_t> seen;
  for (const auto& [step, bucket] : full.buckets) {
    EXPECT_GE(bucket, 0) << step;
    EXPECT_LT(bucket, 3) << step;
    seen.insert(bucket);
  }
  EXPECT_GT(seen.size(), 1u);

  ExpectResumeAfterStep3OnTheCurveOf(spec, full);

  // A batch of 17 fits in none of the buckets.
  spec.train.batch_size = 17;
  RecordingReporter too_large;
  EXPECT_EQ(Train(spec, "too-large", &too_large), kExitBadSpec);
  EXPECT_TRUE(said(too_large, "fits in none of the 3 shape buckets (the largest holds 16"))
      << too_large.events.back();
}

// A loss that turns NaN (issue 31 item 7) ends the rank with its own exit code, never retried,
// and the message names the step and the first trainable tensor the NaN reached.
TEST_F(TrainerTest, ANonFiniteLossStopsWithTheStepAndTheFirstNonFiniteTensor) {
  auto spec = Spec();
  auto latents = torch::randn({4, 4, 4, 8, 8});
  latents.index_put_({2, 0, 0, 0, 0}, std::numeric_limits<float>::quiet_NaN());
  fs::create_directories(root_ / "nan");
  ASSERT_TRUE(WriteTensorFile((root_ / "nan/shard-00000.safetensors").string(),
                              {{"latents", latents}, {"text_states", torch::randn({4, 4, 32})}})
                  .ok());
  spec.data.kind = DataKind::kLatents;
  spec.data.path = (root_ / "nan").string();
  spec.train.batch_size = 4;  // clip 2 is in the first batch
  RecordingReporter rep;
  EXPECT_EQ(Train(spec, "n", &rep), kExitNotFinite);
  EXPECT_EQ(ClassifyExitCode(kExitNotFinite), ExitClass::kFatal);
  ASSERT_FALSE(rep.events.empty());
  const std::string& why = rep.events.back();
  EXPECT_EQ(why.find("not finite at step 1 (loss "), 0u) << why;
  EXPECT_NE(why.find("nan"), std::string::npos) << why;
  EXPECT_NE(why.find("); first non-finite trainable tensor: "), std::string::npos) << why;
  EXPECT_TRUE(rep.losses.empty()) << "no step with a NaN loss is reported as trained";
}

// train.nan_policy rollback: the NaN step records a rollback and exits 7; the next attempt
// resumes from the newest checkpoint with the learning rate x rollback_lr_factor; when the NaN
// comes back after the last rollback the rank exits 6, saying the rollbacks are exhausted.
TEST_F(TrainerTest, ARollbackRestartsFromTheNewestCheckpointWithALowerLearningRate) {
  auto spec =
      Spec({"train.nan_policy=rollback", "train.max_rollbacks=1", "train.rollback_lr_factor=0.25"});
  // A clip of step 3's batch carries a NaN: the sampler the trainer uses (16 clips, seed 7).
  DistributedSampler order(16, 0, 1, 7);
  order.Next(2);
  order.Next(2);
  const int64_t bad = order.Next(2)[0];
  const auto clean = torch::randn({16, 4, 4, 8, 8});
  const auto text = torch::randn({16, 4, 32});
  auto write = [&](bool with_nan) {
    auto latents = clean.clone();
    if (with_nan) latents.index_put_({bad, 0, 0, 0, 0}, std::numeric_limits<float>::quiet_NaN());
    fs::create_directories(root_ / "data");
    return WriteTensorFile((root_ / "data/shard-00000.safetensors").string(),
                           {{"latents", latents}, {"text_states", text}});
  };
  ASSERT_TRUE(write(true).ok());
  spec.data.kind = DataKind::kLatents;
  spec.data.path = (root_ / "data").string();

  RecordingReporter first;
  ASSERT_EQ(Train(spec, "r", &first), kExitRollback);
  EXPECT_EQ(first.events.back().find("not finite at step 3 (loss "), 0u) << first.events.back();
  EXPECT_NE(first.events.back().find("; rollback 1 of 1: restarting from the newest checkpoint "
                                     "with the learning rate x 0.25"),
            std::string::npos)
      << first.events.back();
  EXPECT_EQ(ClassifyExitCode(kExitRollback), ExitClass::kRetryable);
  const std::string record = ReadFileText((root_ / "r/rollbacks.json").string());
  EXPECT_NE(record.find("\"rollbacks\": 1"), std::string::npos) << record;

  // The NaN came from too high a learning rate, say: with it lowered the run goes on.
  ASSERT_TRUE(write(false).ok());
  RecordingReporter second;
  ASSERT_EQ(Train(spec, "r", &second), kExitOk) << second.events.back();
  EXPECT_EQ(second.resumed_from, 2) << "from the newest checkpoint";
  ASSERT_EQ(second.learning_rates.size(), 4u);
  for (const auto& [step, lr] : second.learning_rates) {
    EXPECT_DOUBLE_EQ(lr, 1e-3 * 0.25) << "step " << step;
  }
  EXPECT_NE(std::find_if(second.events.begin(), second.events.end(),
                         [](const auto& e) {
                           return e.find(
                                      "train.nan_policy rollback: 1 of 1 made; the learning "
                                      "rate is x 0.25 (the last at step 3)") == 0;
                         }),
            second.events.end());

  // A NaN after the last rollback: exit 6, never retried.
  ASSERT_TRUE(write(true).ok());
  RecordingReporter third;
  ASSERT_EQ(Train(spec, "r2", &third), kExitRollback);
  RecordingReporter fourth;
  ASSERT_EQ(Train(spec, "r2", &fourth), kExitNotFinite);
  EXPECT_NE(fourth.events.back().find("; rollbacks exhausted (1 of 1, train.max_rollbacks)"),
            std::string::npos)
      << fourth.events.back();
}

TEST_F(TrainerTest, BadInputsGetTheirExitCodes) {
  RecordingReporter r1;
  auto spec = Spec();
  spec.data.kind = DataKind::kLatents;
  spec.data.path = (root_ / "nowhere").string();
  EXPECT_EQ(Train(spec, "d", &r1), kExitDataError);
  ASSERT_FALSE(r1.events.empty());
  EXPECT_NE(r1.events.back().find("nowhere"), std::string::npos) << r1.events.back();

  RecordingReporter r2;
  spec = Spec();
  spec.model.preset = ModelPreset::kNone;
  spec.model.unet2d = (root_ / "no-unet").string();
  EXPECT_EQ(Train(spec, "m", &r2), kExitModelError);
  ASSERT_FALSE(r2.events.empty());
  EXPECT_NE(r2.events.back().find("no-unet"), std::string::npos) << r2.events.back();

  // A checkpoint folder that cannot be made is a bad spec, found before any training.
  RecordingReporter r3;
  std::ofstream(root_ / "a-file") << "x";
  spec = Spec({"checkpoint.dir=" + (root_ / "a-file" / "ckpt").string()});
  EXPECT_EQ(Train(spec, "w", &r3), kExitBadSpec);
  ASSERT_FALSE(r3.events.empty());
  EXPECT_NE(r3.events.back().find("checkpoint.dir: cannot create"), std::string::npos)
      << r3.events.back();
  EXPECT_TRUE(r3.losses.empty());
}

TEST_F(TrainerTest, CorruptNewestCheckpointFallsBackToTheOlderOne) {
  RecordingReporter first;
  first.stop_after = 4;
  ASSERT_EQ(Train(Spec(), "c", &first), kExitStopped);
  // Flip a byte in the newest checkpoint's optimizer state.
  const auto file = root_ / "c/checkpoints/step-00000004/optimizer.safetensors";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  RecordingReporter second;
  ASSERT_EQ(Train(Spec(), "c", &second), kExitOk);
  EXPECT_EQ(second.resumed_from, 2);
  // The fall-back is an event, naming the step passed over and the one resumed from.
  bool said = false;
  for (const std::string& e : second.events) {
    said |= e.find("checkpoint(s) of step 4") != std::string::npos &&
            e.find("resuming from the older step 2") != std::string::npos;
  }
  EXPECT_TRUE(said) << "no event says the newest checkpoint was passed over";
}

TEST_F(TrainerTest, NoUsableCheckpointIsSaidBeforeStartingOver) {
  RecordingReporter first;
  first.stop_after = 2;
  ASSERT_EQ(Train(Spec(), "u", &first), kExitStopped);
  for (const auto& entry : fs::directory_iterator(root_ / "u/checkpoints")) {
    std::fstream f(entry.path() / "optimizer.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  RecordingReporter second;
  ASSERT_EQ(Train(Spec(), "u", &second), kExitOk);
  EXPECT_EQ(second.resumed_from, 0);
  bool said = false;
  for (const std::string& e : second.events) {
    said |= e.find("checkpoint(s) in") != std::string::npos &&
            e.find("verifies") != std::string::npos && e.find("step 0") != std::string::npos;
  }
  EXPECT_TRUE(said) << "no event says the checkpoints were unusable";
}

// --- The background checkpoint writer -------------------------------------------------------

class CheckpointSaverTest : public TrainerTest {};

CheckpointState SmallState(int64_t step, const torch::Tensor& weight) {
  CheckpointState state;
  state.step = step;
  state.motion_adapter = {{"down_blocks.0.motion_modules.0.proj_out.weight", weight}};
  state.motion_adapter_config = "{}";
  state.optimizer = {{"exp_avg.w", weight * 2}, {"step", torch::tensor({step}, torch::kLong)}};
  state.metadata = {{"step", step}};
  return state;
}

TEST_F(CheckpointSaverTest, WritesTheStateAsItWasAtStartWhileTrainingChangesIt) {
  const std::string root = (root_ / "ckpt").string();
  CheckpointSaver saver(root, RetentionPolicy::KeepLast(2));
  EXPECT_FALSE(saver.Poll().has_value());
  auto weight = torch::ones({1000});
  saver.Start(SmallState(1, weight));
  weight.fill_(5);                     // the next optimizer step, while the write runs
  saver.Start(SmallState(2, weight));  // waits for the first write; never two in flight
  auto first = saver.Wait();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->step, 1);  // results come oldest first
  ASSERT_TRUE(first->status.ok()) << first->status.ToString();
  auto second = saver.Poll();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->step, 2);
  EXPECT_FALSE(saver.Poll().has_value());
  EXPECT_FALSE(saver.in_flight());

  auto verified = VerifyCheckpoint(first->path);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(verified->metadata["step"], 1);
  auto read = ReadTensorFile(first->path + "/motion_adapter/diffusion_pytorch_model.safetensors");
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(torch::equal(read->begin()->second, torch::ones({1000})));  // not the 5s
  auto read2 = ReadTensorFile(second->path + "/optimizer.safetensors");
  ASSERT_TRUE(read2.ok());
  EXPECT_TRUE(torch::equal(read2->at("exp_avg.w"), torch::full({1000}, 10.0f)));
  EXPECT_GT(second->size_bytes, 8000);
}

TEST_F(CheckpointSaverTest, AFailedWriteIsReportedWithItsCause) {
  const fs::path blocker = root_ / "not-a-directory";
  std::ofstream(blocker) << "x";
  CheckpointSaver saver(blocker.string(), RetentionPolicy::KeepLast(1));
  saver.Start(SmallState(3, torch::ones({4})));
  auto saved = saver.Wait();
  ASSERT_TRUE(saved.has_value());
  EXPECT_FALSE(saved->status.ok());
  EXPECT_NE(saved->status.ToString().find(blocker.string()), std::string::npos)
      << saved->status.ToString();
  EXPECT_TRUE(saved->path.empty());
}

// A folder of the checkpoint root's path swapped for a symlink after the run started (into
// another job's checkpoints) is refused, not followed.
TEST_F(CheckpointSaverTest, ARootSwappedForASymlinkIsRefused) {
  fs::create_directories(root_ / "mine" / "ckpt");
  fs::create_directories(root_ / "theirs" / "ckpt");
  CheckpointSaver saver((root_ / "mine" / "ckpt").string(), RetentionPolicy::KeepLast(1));
  fs::rename(root_ / "mine", root_ / "mine-moved");
  fs::create_directory_symlink(root_ / "theirs", root_ / "mine");
  saver.Start(SmallState(4, torch::ones({4})));
  auto saved = saver.Wait();
  ASSERT_TRUE(saved.has_value());
  EXPECT_FALSE(saved->status.ok());
  EXPECT_NE(saved->status.message().find("a symlink in its path?): nothing written"),
            std::string::npos)
      << saved->status.ToString();
  EXPECT_TRUE(fs::is_empty(root_ / "theirs" / "ckpt"));
}

// Runs in its own process, started by the test below: writes a checkpoint of 512 MB at step 2
// and waits for the background write, which the test kills.
TEST(CheckpointSaverChild, DISABLED_WritesALargeCheckpoint) {
  const char* root = std::getenv("ADCTL_SAVER_TEST_ROOT");
  ASSERT_NE(root, nullptr);
  CheckpointSaver saver(root, RetentionPolicy::KeepLast(3));
  CheckpointState state = SmallState(2, torch::ones({64 << 20}));
  saver.Start(state);
  saver.Wait();
}

TEST_F(CheckpointSaverTest, AWorkerKilledDuringTheBackgroundWriteKeepsThePreviousCheckpoint) {
  const std::string root = (root_ / "ckpt").string();
  {
    CheckpointSaver saver(root, RetentionPolicy::KeepLast(3));
    saver.Start(SmallState(1, torch::ones({16})));
    auto saved = saver.Wait();
    ASSERT_TRUE(saved && saved->status.ok());
  }
  const std::string env_root = "ADCTL_SAVER_TEST_ROOT=" + root;
  std::vector<std::string> args = {"/proc/self/exe", "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=CheckpointSaverChild.DISABLED_*"};
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(const_cast<char*>(env_root.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()), 0);
  // Kill it once the background write has begun writing tensors into its temporary directory.
  std::string tmp_dir;
  for (int i = 0; i < 6000 && tmp_dir.empty(); ++i) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind(".tmp-step-00000002-", 0) == 0 &&
          fs::exists(entry.path() / "motion_adapter/diffusion_pytorch_model.safetensors")) {
        tmp_dir = entry.path().string();
      }
    }
    if (tmp_dir.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(tmp_dir.empty()) << "the child never started writing step 2";
  EXPECT_TRUE(WIFSIGNALED(status)) << "the write finished before the kill";

  EXPECT_FALSE(fs::exists(root + "/step-00000002"));
  auto latest = LatestVerifiedCheckpoint(root);
  ASSERT_TRUE(latest.ok());
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->info.step, 1);
  // Retention removes the dead writer's temporary directory.
  auto retention = ApplyRetention(root, 3);
  ASSERT_TRUE(retention.ok());
  EXPECT_FALSE(fs::exists(tmp_dir));
}

// The shapes compiled ahead of the first step are the spatial attentions the SD1.5 UNet runs:
// self- and cross-attention at each level with a transformer (64×64 … 8×8 latent pixels of a
// 512² clip here), heads of 320 / 8 … 1280 / 8, the text keys once per clip.
TEST(AttentionWarmup, Sd15ShapesAreEachLevelsSelfAndCrossAttention) {
  const auto shapes = SpatialAttentionShapes(Sd15UNetConfig(), /*clips=*/2, /*frames=*/16,
                                             /*latent_height=*/64, /*latent_width=*/64, 77);
  std::vector<AttentionShape> expected;
  for (const auto& [hw, d] :
       std::vector<std::pair<int64_t, int64_t>>{{4096, 40}, {1024, 80}, {256, 160}, {64, 160}}) {
    expected.push_back({32, 8, hw, hw, d, false, 2});
    expected.push_back({32, 8, hw, 77, d, true, 2});
  }
  ASSERT_EQ(shapes.size(), expected.size());
  for (const auto& e : expected) {
    EXPECT_NE(std::find(shapes.begin(), shapes.end(), e), shapes.end())
        << e.queries << " queries over " << e.keys << ", head dim " << e.head_dim;
  }
  // Nothing starts on the CPU: the set-up does not wait for anything.
  AttentionWarmup none(shapes, torch::kCPU, torch::kBFloat16, AttentionKernel::kAuto);
  EXPECT_EQ(none.started(), 0u);
  EXPECT_EQ(none.Wait(), 0);
}

}  // namespace
}  // namespace adctl
