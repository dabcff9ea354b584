// The spec's nested sections and their own checks: eval, train.ema, checkpoint.keep_best,
// model.lora, the launcher fields, data.sources and train.nan_policy.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/job_spec.h"
#include "tests/common/job_spec_test_util.h"

namespace adctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(JobSpecTest, EvalChecksNameTheField) {
  const std::string base = "model: {preset: tiny}\ndata: {kind: synthetic, num_samples: 16}\n";
  auto ok = ParseJobSpec(base + "eval: {holdout_clips: 4, timesteps: [0, 999]}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->eval.every_steps, 500);
  EXPECT_NE(JobSpecToYaml(*ok).find("holdout_clips: 4"), std::string::npos);
  // Without eval the canonical spec has no eval section.
  EXPECT_EQ(JobSpecToYaml(*ParseJobSpec(base)).find("eval:"), std::string::npos);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"eval: {holdout_clips: 16}\n", "eval.holdout_clips: 16 leaves no clip"},
      {"eval: {holdout_clips: 2, path: /c}\n", "eval: set holdout_clips"},
      {"eval: {holdout_clips: 2, timesteps: [1000]}\n", "eval.timesteps[0]"},
      {"eval: {holdout_clips: 2, timesteps: []}\n", "eval.timesteps: at least one"},
      {"eval: {holdout_clips: -1}\n", "eval.holdout_clips"},
  };
  for (const auto& [text, message] : bad) {
    auto s = ParseJobSpec(base + text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_THAT(s.status().message(), HasSubstr(message)) << text;
  }
}

TEST(JobSpecTest, EmaAndKeepBestAreNestedSectionsWithTheirOwnChecks) {
  const std::string base = "model: {preset: tiny}\ndata: {kind: synthetic, num_samples: 16}\n";
  auto ok = ParseJobSpec(base +
                         "train: {ema: {decay: 0.999, start_step: 100, update_every: 2, "
                         "device: cpu}}\n"
                         "checkpoint: {keep_best: {metric: eval_loss, k: 3}}\n"
                         "eval: {holdout_clips: 4, weights: ema}\n"
                         "validation: {weights: ema}\nexport: {weights: ema}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->train.ema.decay, 0.999);
  EXPECT_EQ(ok->train.ema.start_step, 100);
  EXPECT_EQ(ok->train.ema.update_every, 2);
  EXPECT_EQ(ok->train.ema.device, EmaDevice::kCpu);
  EXPECT_EQ(ok->checkpoint.keep_best.k, 3);
  EXPECT_EQ(ok->eval.weights, WeightsSource::kEma);
  // The canonical YAML round-trips them, and leaves them out when unset.
  auto again = ParseJobSpec(JobSpecToYaml(*ok));
  ASSERT_TRUE(again.ok()) << JobSpecToYaml(*ok);
  EXPECT_EQ(JobSpecToYaml(*again), JobSpecToYaml(*ok));
  const std::string plain = JobSpecToYaml(*ParseJobSpec(base));
  EXPECT_EQ(plain.find("ema"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("keep_best"), std::string::npos) << plain;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"train: {ema: {decay: 1.0}}\n", "train.ema.decay: must be in [0, 1)"},
      {"train: {ema: {decay: 0.9, update_every: 0}}\n", "train.ema.update_every"},
      {"train: {ema: {decay: 0.9, device: tpu}}\n", "train.ema.device"},
      {"eval: {holdout_clips: 2, weights: ema}\n", "eval.weights: ema needs train.ema"},
      {"export: {weights: average}\n", "export.weights: must be one of"},
      {"checkpoint: {keep_best: {k: 2}}\n", "checkpoint.keep_best: ranks checkpoints by eval_loss"},
      {"checkpoint: {keep_best: {metric: loss, k: 2}}\neval: {holdout_clips: 2}\n",
       "checkpoint.keep_best.metric"},
      {"train: {ema: {decay: 0.9, bogus: 1}}\n", "train.ema.bogus"},
  };
  for (const auto& [text, message] : bad) {
    auto s = ParseJobSpec(base + text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_THAT(s.status().message(), HasSubstr(message)) << text;
  }
}

TEST(JobSpecTest, LoraIsANestedSectionWithItsOwnChecks) {
  const std::string base =
      "model: {unet_motion: /m/unet_motion, lora: {rank: 64, alpha: 32, targets: [to_q, to_v], "
      "scope: both, dropout: 0.1}}\n";
  auto spec = ParseJobSpec(base);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->model.lora.enabled());
  EXPECT_EQ(spec->model.lora.rank, 64);
  EXPECT_EQ(spec->model.lora.alpha, 32);
  EXPECT_EQ(spec->model.lora.targets, (std::vector<std::string>{"to_q", "to_v"}));
  EXPECT_EQ(spec->model.lora.scope, LoraScope::kBoth);
  // The canonical form nests it and reads back the same; --set reaches into it.
  const std::string yaml = JobSpecToYaml(*spec);
  EXPECT_THAT(yaml, HasSubstr("\n  lora:\n    rank: 64\n    alpha: 32\n"));
  auto back = ParseJobSpec(yaml);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == *spec);
  auto set = ParseJobSpec(base, {"model.lora.rank=16"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->model.lora.rank, 16);
  // Without a LoRA nothing of it is written.
  EXPECT_THAT(JobSpecToYaml(*ParseJobSpec("model: {preset: tiny}\n")), Not(HasSubstr("lora")));

  const std::pair<const char*, const char*> bad[] = {
      {"model: {preset: tiny, lora: {rank: 4}}\n", "has random motion modules"},
      {"model: {pretrained: /m/sd15, lora: {rank: 4}}\n", "needs a trained motion module"},
      {"model: {unet_motion: /m/u, lora: {rank: 0, alpha: 4}}\n", "set model.lora.rank"},
      {"model: {unet_motion: /m/u, lora: {rank: 2000}}\n", "model.lora.rank: must be"},
      {"model: {unet_motion: /m/u, lora: {rank: 4, targets: [to_x]}}\n",
       "model.lora.targets: must be one of"},
      {"model: {unet_motion: /m/u, lora: {rank: 4, dropout: 1}}\n", "model.lora.dropout"},
      {"model: {unet_motion: /m/u, lora: {rank: 4, ranks: 8}}\n",
       "unknown field 'model.lora.ranks' (did you mean 'model.lora.rank'?)"},
      {"model: {unet_motion: /m/u, lora: 4}\n", "model.lora: expected a mapping"},
      // A LoRA job exports LoRA formats; a full-module job the motion-module ones.
      {"model: {unet_motion: /m/u, lora: {rank: 4}}\nexport: {formats: [diffusers]}\n",
       "export.formats[0]: must be one of 'diffusers-lora', 'animatediff-lora', 'merged'"},
      {"model: {unet_motion: /m/u}\nexport: {formats: [merged]}\n",
       "export.formats[0]: must be one of 'diffusers', 'animatediff'"},
      {"model: {unet_motion: /m/u, lora: {rank: 4, scope: both}}\n"
       "export: {formats: [animatediff-lora]}\n",
       "animatediff-lora holds motion-module adapters only"},
  };
  for (const auto& [text, says] : bad) {
    auto refused = ParseJobSpec(text);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_THAT(refused.status().message(), HasSubstr(says)) << text;
  }
  // A preset with a trained motion module of its shape takes a LoRA (benchmarks at its size).
  auto preset = ParseJobSpec(
      "model: {preset: sd15, motion_adapter: /ckpt/motion_adapter, lora: {rank: 64}}\n"
      "export: {formats: [diffusers-lora, animatediff-lora, merged]}\n");
  EXPECT_TRUE(preset.ok()) << preset.status().ToString();
}

TEST(JobSpecTest, LauncherFieldsAreCheckedAndLeftOutOfRankCopies) {
  auto spec = ParseJobSpec(
      "model: {preset: tiny}\n"
      "resources: {launcher: slurm, nodes: 2, gpus_per_node: 4, gpus: 8, slurm_partition: gpu,"
      " slurm_extra_args: [--exclusive]}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->resources.launcher, LauncherKind::kSlurm);
  EXPECT_EQ(spec->resources.nodes, 2);
  const std::string yaml = JobSpecToYaml(spec.value());
  EXPECT_THAT(yaml, HasSubstr("slurm_partition: \"gpu\""));
  auto back = ParseJobSpec(yaml);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back.value(), spec.value());
  // A default spec writes none of them; a rank's copy has them cleared.
  EXPECT_THAT(JobSpecToYaml(JobSpec()), Not(HasSubstr("launcher")));
  JobSpec rank_copy = spec.value();
  ClearLauncherFields(&rank_copy.resources);
  EXPECT_THAT(JobSpecToYaml(rank_copy), Not(HasSubstr("slurm")));

  EXPECT_THAT(
      ParseJobSpec("model: {preset: tiny}\nresources: {launcher: pbs}\n").status().message(),
      HasSubstr("resources.launcher: must be one of 'local', 'slurm'"));
  EXPECT_THAT(
      ParseJobSpec("model: {preset: tiny}\nresources: {nodes: 2, gpus_per_node: 2, gpus: 3}\n")
          .status()
          .message(),
      HasSubstr("resources.gpus: must be resources.nodes × resources.gpus_per_node = 4"));
  EXPECT_THAT(
      ParseJobSpec("model: {preset: tiny}\nresources: {nodes: 2, gpus: 3}\n").status().message(),
      HasSubstr("do not split evenly"));
  EXPECT_THAT(
      ParseJobSpec("model: {preset: tiny}\nresources: {launcher: local, nodes: 2, gpus: 2}\n")
          .status()
          .message(),
      HasSubstr("apply to resources.launcher: slurm only"));
}

// Preemption (issue 31 item 4): preemptible and allow_shrink round-trip, are written only when
// set and left out of a rank's copy; allow_shrink needs preemptible, Slurm jobs cannot be either.
// WithRankCount keeps the global batch or names why it cannot.
TEST(JobSpecTest, PreemptionFieldsAndResizingKeepTheGlobalBatch) {
  auto spec = ParseJobSpec(
      "model: {preset: tiny}\ntrain: {batch_size: 2, grad_accum: 3}\n"
      "resources: {gpus: 4, preemptible: true, allow_shrink: true}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->resources.preemptible);
  const std::string yaml = JobSpecToYaml(spec.value());
  EXPECT_THAT(yaml, HasSubstr("preemptible: true"));
  EXPECT_EQ(ParseJobSpec(yaml).value(), spec.value());
  EXPECT_THAT(JobSpecToYaml(JobSpec()), Not(HasSubstr("preemptible")));
  JobSpec rank_copy = spec.value();
  ClearCoordinatorFields(&rank_copy);
  EXPECT_THAT(JobSpecToYaml(rank_copy), Not(HasSubstr("preemptible")));
  EXPECT_THAT(JobSpecToYaml(rank_copy), Not(HasSubstr("allow_shrink")));

  EXPECT_THAT(
      ParseJobSpec("model: {preset: tiny}\nresources: {allow_shrink: true}\n").status().message(),
      HasSubstr("resources.allow_shrink: needs resources.preemptible: true"));
  EXPECT_THAT(
      ParseJobSpec("model: {preset: tiny}\nresources: {launcher: slurm, preemptible: true}\n")
          .status()
          .message(),
      HasSubstr("resources.preemptible: applies to jobs on adctld's own devices"));

  // Global batch 2 x 3 x 4 = 24: on 3 ranks grad_accum 4, on 2 ranks 6; 5 ranks cannot.
  auto three = WithRankCount(spec.value(), 3, "gpus");
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ(three->train.grad_accum, 4);
  EXPECT_EQ(three->resources.gpus, 3);
  EXPECT_EQ(three->GlobalBatch(), 24);
  EXPECT_EQ(WithRankCount(spec.value(), 2, "gpus")->train.grad_accum, 6);
  EXPECT_THAT(WithRankCount(spec.value(), 5, "gpus").status().message(),
              HasSubstr("gpus: cannot keep the global batch of 24 clips"));
}

// data.sources (issue 32 item 3): a list of {path, weight | repeats}, round-tripped, with the
// mistakes a user makes named.
TEST(JobSpecTest, DataSourcesAreAListOfWeightedOrRepeatedCaches) {
  const std::string base = "model: {preset: tiny}\ntrain: {max_steps: 2}\n";
  auto mix = ParseJobSpec(base +
                          "data:\n  kind: latents\n  sources:\n    - {path: /c/webvid, weight: 3}\n"
                          "    - path: /c/ours\n      weight: 1.5\n");
  ASSERT_TRUE(mix.ok()) << mix.status().ToString();
  ASSERT_EQ(mix->data.sources.size(), 2u);
  EXPECT_EQ(mix->data.sources[0], (DataSource{"/c/webvid", 3, 0}));
  EXPECT_EQ(mix->data.sources[1], (DataSource{"/c/ours", 1.5, 0}));
  const std::string yaml = JobSpecToYaml(*mix);
  EXPECT_THAT(yaml, HasSubstr("  sources: [{path: \"/c/webvid\", weight: 3}, "
                              "{path: \"/c/ours\", weight: 1.5}]\n"));
  auto again = ParseJobSpec(yaml);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(*again == *mix);
  auto other =
      ParseJobSpec(yaml, {"data.sources=[{path: /c/webvid, repeats: 2}, {path: /c/ours}]"});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_FALSE(*other == *mix);
  EXPECT_EQ(other->data.sources[0].repeats, 2);
  EXPECT_EQ(
      JobSpecToYaml(*ParseJobSpec(base + "data: {kind: latents, path: /c}\n")).find("\n  sources:"),
      std::string::npos)
      << "left out of a one-cache spec";

  const std::string latents = base + "data:\n  kind: latents\n";
  for (const auto& [data, message] : std::vector<std::pair<std::string, std::string>>{
           {"  sources: [{path: /a, wieght: 3}]\n",
            "unknown field 'data.sources[0].wieght' (a source has path, weight, repeats)"},
           {"  sources: [/a, /b]\n",
            "data.sources[0]: expected a mapping {path, weight | repeats}"},
           {"  sources: {path: /a}\n", "data.sources: expected a list"},
           {"  sources: [{weight: 3}]\n", "data.sources[0].path: required"},
           {"  sources: [{path: /a, weight: 0}, {path: /b, weight: 1}]\n",
            "data.sources[0]: no weight, and data.sources[1] has one"},
           {"  sources: [{path: /a, weight: -2}]\n", "data.sources[0].weight: must be in (0, 1e6]"},
           {"  sources: [{path: /a, weight: 2, repeats: 2}]\n",
            "data.sources[0]: give weight or repeats, not both"},
           {"  sources: [{path: /a, repeats: 0.5}]\n",
            "data.sources[0].repeats: expected an integer"},
           {"  sources: [{path: /a}, {path: /a, repeats: 2}]\n",
            "data.sources[1].path: the same cache as data.sources[0]"},
           {"  sources: [{path: /a, weight: 3}, {path: /b}]\n",
            "data.sources[1]: no weight, and data.sources[0] has one"},
           {"  path: /c\n  sources: [{path: /a}]\n", "data.path and data.sources: give one"},
       }) {
    auto bad = ParseJobSpec(latents + data);
    ASSERT_FALSE(bad.ok()) << data;
    EXPECT_THAT(bad.status().message(), HasSubstr(message)) << data;
  }
  auto synthetic = ParseJobSpec(base + "data: {kind: synthetic, sources: [{path: /a}]}\n");
  ASSERT_FALSE(synthetic.ok());
  EXPECT_THAT(synthetic.status().message(),
              HasSubstr("data.sources: only used with data.kind 'latents', got kind 'synthetic'"));
}

// preprocess.buckets (issue 32 item 4): a list of {width, height, frames}, round-tripped, for
// preprocess jobs only, each a size the VAE takes.
TEST(JobSpecTest, PreprocessBucketsAreAListOfPixelSizesAndFrames) {
  const std::string base =
      "kind: preprocess\nmodel: {pretrained: /sd}\n"
      "data: {kind: video, csv: /v/videos.csv, video_dir: /v}\n";
  auto spec = ParseJobSpec(base +
                           "preprocess:\n  output: /c\n  buckets:\n"
                           "    - {width: 512, height: 320, frames: 16}\n"
                           "    - {width: 320, height: 512, frames: 12}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->preprocess.buckets.size(), 2u);
  EXPECT_EQ(spec->preprocess.buckets[0], (PreprocessBucket{512, 320, 16}));
  EXPECT_EQ(spec->preprocess.buckets[1], (PreprocessBucket{320, 512, 12}));
  const std::string yaml = JobSpecToYaml(*spec);
  EXPECT_THAT(yaml, HasSubstr("  buckets: [{width: 512, height: 320, frames: 16}, "
                              "{width: 320, height: 512, frames: 12}]\n"));
  auto again = ParseJobSpec(yaml);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(*again == *spec);
  EXPECT_EQ(JobSpecToYaml(*ParseJobSpec(base + "preprocess: {output: /c}\n")).find("buckets"),
            std::string::npos)
      << "left out of a one-shape spec";

  for (const auto& [buckets, message] : std::vector<std::pair<std::string, std::string>>{
           {"[{width: 512, height: 320}]", "preprocess.buckets[0].frames: required"},
           {"[{width: 512, height: 320, frames: 16, fps: 8}]",
            "unknown field 'preprocess.buckets[0].fps' (a bucket has width, height, frames)"},
           {"[{width: 510, height: 320, frames: 16}]",
            "preprocess.buckets[0].width: must be a multiple of 8 in [8, 8192], got 510"},
           {"[{width: 512, height: 0, frames: 16}]", "preprocess.buckets[0].height: must be"},
           {"[{width: 512, height: 320, frames: 0}]",
            "preprocess.buckets[0].frames: must be in [1, 1024]"},
           {"[{width: 64, height: 64, frames: 8}, {width: 64, height: 64, frames: 8}]",
            "preprocess.buckets[1]: the same bucket as preprocess.buckets[0]"},
           {"[512, 320]", "preprocess.buckets[0]: expected a mapping {width, height, frames}"},
       }) {
    auto bad = ParseJobSpec(base + "preprocess: {output: /c, buckets: " + buckets + "}\n");
    ASSERT_FALSE(bad.ok()) << buckets;
    EXPECT_THAT(bad.status().message(), HasSubstr(message)) << buckets;
  }
  auto training = ParseJobSpec(
      "model: {preset: tiny}\npreprocess: {buckets: [{width: 64, height: 64, frames: 8}]}\n");
  ASSERT_FALSE(training.ok());
  EXPECT_THAT(training.status().message(),
              HasSubstr("preprocess.buckets: only used by kind 'preprocess'"));
}

// train.nan_policy (issue 31 item 7): fail or rollback, the rollbacks bounded by the restarts.
TEST(JobSpecTest, NanPolicyRollbackIsBoundedByTheRestarts) {
  const std::string base = "model: {preset: tiny}\n";
  auto fail = ParseJobSpec(base);
  ASSERT_TRUE(fail.ok());
  EXPECT_EQ(fail->train.nan_policy, NanPolicy::kFail);
  EXPECT_EQ(JobSpecToYaml(*fail).find("max_rollbacks"), std::string::npos) << "rollback only";
  auto rollback = ParseJobSpec(base + "train: {nan_policy: rollback, rollback_lr_factor: 0.1}\n");
  ASSERT_TRUE(rollback.ok()) << rollback.status().ToString();
  EXPECT_THAT(JobSpecToYaml(*rollback),
              HasSubstr("  rollback_lr_factor: 0.1\n  max_rollbacks: 3\n"));
  for (const auto& [yaml, message] : std::vector<std::pair<std::string, std::string>>{
           {"train: {nan_policy: retry}\n", "train.nan_policy: must be one of"},
           {"train: {nan_policy: rollback, rollback_lr_factor: 0}\n",
            "train.rollback_lr_factor: must be in (0, 1], got 0"},
           {"train: {nan_policy: rollback, max_rollbacks: 5}\n",
            "train.max_rollbacks: 5 is above resources.max_restarts (3): each rollback restarts "
            "the job"},
       }) {
    auto bad = ParseJobSpec(base + yaml);
    ASSERT_FALSE(bad.ok()) << yaml;
    EXPECT_THAT(bad.status().message(), HasSubstr(message)) << yaml;
  }
  EXPECT_TRUE(ParseJobSpec(base + "train: {nan_policy: rollback, max_rollbacks: 5}\n"
                                  "resources: {max_restarts: 5}\n")
                  .ok());
}

TEST(JobSpecTest, NotifyWebhooksAreUrlsAndStayOutOfTheRanksCopy) {
  auto spec = ParseJobSpec(
      "model: {preset: tiny}\nnotify: {webhooks: [\"https://hooks.example.com/T0/B0/x\"]}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->notify.webhooks, std::vector<std::string>{"https://hooks.example.com/T0/B0/x"});
  auto back = ParseJobSpec(JobSpecToYaml(spec.value()));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back.value(), spec.value());
  EXPECT_THAT(JobSpecToYaml(JobSpec()), Not(HasSubstr("notify")));
  JobSpec rank_copy = spec.value();
  ClearCoordinatorFields(&rank_copy);
  EXPECT_THAT(JobSpecToYaml(rank_copy), Not(HasSubstr("hooks.example.com")));

  for (const char* bad : {"ftp://example.com/x", "example.com/x", "http:///x", "http://a b"}) {
    auto refused =
        ParseJobSpec(std::string("model: {preset: tiny}\nnotify: {webhooks: [\"") + bad + "\"]}\n");
    EXPECT_THAT(refused.status().message(), HasSubstr("notify.webhooks[0]: ")) << bad;
  }
  std::string nine = "model: {preset: tiny}\nnotify: {webhooks: [";
  for (int i = 0; i < 9; ++i)
    nine += std::string(i ? ", " : "") + "\"http://h/" + std::to_string(i) + "\"";
  EXPECT_THAT(ParseJobSpec(nine + "]}\n").status().message(),
              HasSubstr("notify.webhooks: at most 8 URLs, got 9"));
}

}  // namespace
}  // namespace adctl
