#include "common/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "tests/common/job_spec_test_util.h"

namespace adctl {
namespace {

using ::testing::HasSubstr;

TEST(JobSpecTest, ParsesSectionsAndBetasList) {
  Result<JobSpec> spec = ParseJobSpec(kTiny);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "tiny-test");
  EXPECT_EQ(spec->model.preset, ModelPreset::kTiny);
  EXPECT_EQ(spec->train.max_steps, 5);
  EXPECT_DOUBLE_EQ(spec->train.lr, 3e-4);
  EXPECT_DOUBLE_EQ(spec->train.beta1, 0.8);
  EXPECT_DOUBLE_EQ(spec->train.beta2, 0.95);
  // Untouched fields keep their defaults.
  EXPECT_EQ(spec->data.height, 16);
  EXPECT_EQ(spec->checkpoint.keep_last, 3);
  EXPECT_TRUE(spec->checkpoint.enabled);
  EXPECT_EQ(spec->train.attention, AttentionKernel::kAuto);
  EXPECT_EQ(spec->GlobalBatch(), 1);
}

TEST(JobSpecTest, AcceptsBeta1Beta2Keys) {
  Result<JobSpec> spec = ParseJobSpec("model: {preset: tiny}\ntrain: {beta1: 0.5, beta2: 0.6}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_DOUBLE_EQ(spec->train.beta1, 0.5);
  EXPECT_DOUBLE_EQ(spec->train.beta2, 0.6);
  EXPECT_THAT(
      ParseError("model: {preset: tiny}\ntrain: {betas: [0.9, 0.99], beta1: 0.5}\n").message(),
      HasSubstr("train.betas"));
}

TEST(JobSpecTest, UnknownKeysNameTheDottedPath) {
  Status st = ParseError("model: {preset: tiny}\ntrain:\n  learning_rate: 1e-4\n");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("unknown field 'train.learning_rate'"));
  EXPECT_THAT(ParseError("model: {preset: tiny}\nmodle: {}\n").message(),
              HasSubstr("unknown field 'modle'"));
  EXPECT_THAT(ParseError("model: {preset: tiny, unet: x}\n").message(),
              HasSubstr("unknown field 'model.unet'"));
  // A near miss gets a suggestion.
  EXPECT_THAT(ParseError("model: {preset: tiny}\ntrain: {max_step: 3}\n").message(),
              HasSubstr("did you mean 'train.max_steps'"));
}

TEST(JobSpecTest, WrongTypesNameFieldAndExpectation) {
  EXPECT_THAT(ParseError("model: {preset: tiny}\ntrain: {max_steps: 1.5}\n").message(),
              HasSubstr("train.max_steps: expected an integer, got '1.5'"));
  EXPECT_THAT(ParseError("model: {preset: tiny}\ntrain: {lr: fast}\n").message(),
              HasSubstr("train.lr: expected a number, got 'fast'"));
  EXPECT_THAT(ParseError("model: {preset: tiny}\ntrain: {lr: \"1e-4\"}\n").message(),
              HasSubstr("train.lr: expected a number"));
  EXPECT_THAT(ParseError("model: {preset: tiny, gradient_checkpointing: maybe}\n").message(),
              HasSubstr("model.gradient_checkpointing: must be one of 'none', 'resnets', 'full'"));
  EXPECT_THAT(ParseError("model: {preset: [tiny]}\n").message(),
              HasSubstr("model.preset: expected a string, got a sequence"));
  EXPECT_THAT(ParseError("model: {preset: tiny}\ntrain: 3\n").message(),
              HasSubstr("train: expected a mapping"));
  EXPECT_THAT(ParseError("model: {preset: tiny}\ntrain: {betas: [0.9]}\n").message(),
              HasSubstr("train.betas: expected a list of two numbers"));
  EXPECT_THAT(ParseError("- a\n- b\n").message(), HasSubstr("top level"));
  EXPECT_THAT(ParseError("model: {preset: tiny\n").message(), HasSubstr("YAML error at line"));
}

TEST(JobSpecTest, OversizedOrInvalidUtf8SpecsAreRefused) {
  const std::string big = std::string(kTiny) + "# " + std::string(2 << 20, 'x') + "\n";
  EXPECT_THAT(ParseError(big).message(), HasSubstr("more than the 1048576 a job spec may have"));
  EXPECT_THAT(ParseError("name: \"caf\xc3\"\n").message(),
              HasSubstr("spec: not valid UTF-8 at byte 10"));
  EXPECT_THAT(ParseError("name: \xed\xa0\x80\n").message(),  // a surrogate
              HasSubstr("not valid UTF-8 at byte 6"));
  EXPECT_THAT(ParseError(kTiny, {"name=\xff"}).message(), HasSubstr("--set: not valid UTF-8"));
  // Multi-byte text is fine where strings are free-form.
  EXPECT_TRUE(
      ParseJobSpec(std::string(kTiny) + "# caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x8e\xac\n").ok());
}

TEST(JobSpecTest, DuplicateKeysAreErrors) {
  EXPECT_THAT(ParseError("model: {preset: tiny}\ntrain:\n  lr: 1\n  lr: 2\n").message(),
              HasSubstr("train.lr"));
}

TEST(JobSpecTest, Overrides) {
  Result<JobSpec> spec = ParseJobSpec(
      kTiny, {"train.lr=1e-3", "train.betas=[0.9,0.99]", "resources.gpus=4",
              "model.gradient_checkpointing=true", "name=renamed", "checkpoint.dir=/tmp/x y"});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_DOUBLE_EQ(spec->train.lr, 1e-3);
  EXPECT_DOUBLE_EQ(spec->train.beta1, 0.9);
  EXPECT_DOUBLE_EQ(spec->train.beta2, 0.99);
  EXPECT_EQ(spec->resources.gpus, 4);  // section absent from the file: created
  EXPECT_EQ(spec->model.gradient_checkpointing, GradientCheckpointing::kFull);  // the old bool
  EXPECT_EQ(spec->name, "renamed");
  EXPECT_EQ(spec->checkpoint.dir, "/tmp/x y");
  EXPECT_FALSE(spec->train.cudnn_benchmark);  // off unless asked for
  EXPECT_TRUE(ParseJobSpec(kTiny, {"train.cudnn_benchmark=true"})->train.cudnn_benchmark);
  EXPECT_TRUE(spec->train.fused_kernels);  // on unless turned off
  EXPECT_FALSE(ParseJobSpec(kTiny, {"train.fused_kernels=false"})->train.fused_kernels);

  // One beta over a file that uses the list form edits the list.
  Result<JobSpec> one_beta = ParseJobSpec(kTiny, {"train.beta2=0.5"});
  ASSERT_TRUE(one_beta.ok()) << one_beta.status().ToString();
  EXPECT_DOUBLE_EQ(one_beta->train.beta1, 0.8);
  EXPECT_DOUBLE_EQ(one_beta->train.beta2, 0.5);

  // An empty value sets an empty string.
  Result<JobSpec> no_preset =
      ParseJobSpec(kTiny, {"model.preset=", "model.unet_motion=/models/um"});
  ASSERT_TRUE(no_preset.ok()) << no_preset.status().ToString();
  EXPECT_EQ(no_preset->model.preset, ModelPreset::kNone);
  EXPECT_EQ(no_preset->model.unet_motion, "/models/um");

  // Into an empty document.
  Result<JobSpec> empty = ParseJobSpec("", {"model.preset=tiny"});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
}

TEST(JobSpecTest, OverrideErrors) {
  EXPECT_THAT(ParseError(kTiny, {"train.lr"}).message(), HasSubstr("expected key=value"));
  EXPECT_THAT(ParseError(kTiny, {"train.learning_rate=1"}).message(),
              HasSubstr("unknown field 'train.learning_rate'"));
  EXPECT_THAT(ParseError(kTiny, {"train=1"}).message(), HasSubstr("is a section"));
  EXPECT_THAT(ParseError(kTiny, {"train.max_steps=abc"}).message(),
              HasSubstr("train.max_steps: expected an integer, got 'abc'"));
  EXPECT_THAT(ParseError(kTiny, {"train.lr=-1"}).message(),
              HasSubstr("train.lr: must be > 0, got -1"));
  EXPECT_THAT(ParseError(kTiny, {"train.betas=[0.9"}).message(), HasSubstr("YAML error"));
}

struct ValidationCase {
  std::vector<std::string> overrides;
  std::string expected;
};

TEST(JobSpecTest, ValidationNamesFieldAndValue) {
  const std::vector<ValidationCase> cases = {
      {{"train.lr=0"}, "train.lr: must be > 0, got 0"},
      // Bounds: nothing may wrap or overflow further on.
      {{"train.lr=5"}, "train.lr: must be in [0, 1], got 5"},
      {{"train.batch_size=100000"}, "train.batch_size: must be in [1, 4096], got 100000"},
      {{"resources.priority=-2147483649"},
       "resources.priority: must be in [-1000000, 1000000], got -2147483649"},
      {{"resources.grace_seconds=1e300"}, "resources.grace_seconds: must be in [0, 86400]"},
      {{"resources.rendezvous_timeout_seconds=1e9"},
       "resources.rendezvous_timeout_seconds: must be in [0, 86400]"},
      {{"resources.max_restarts=1000000"}, "resources.max_restarts: must be in [0, 1000]"},
      {{"train.batch_size=0"}, "train.batch_size: must be in [1, 4096], got 0"},
      {{"train.grad_accum=0"}, "train.grad_accum: must be in [1, 65536], got 0"},
      {{"train.max_steps=0"}, "train.max_steps: must be in [1, 1000000000], got 0"},
      {{"resources.gpus=0"}, "resources.gpus: must be in [1, 4096], got 0"},
      {{"checkpoint.keep_last=0"}, "checkpoint.keep_last: must be >= 1, got 0"},
      {{"checkpoint.every_steps=-1"}, "checkpoint.every_steps: must be >= 0, got -1"},
      {{"train.warmup_steps=-1"}, "train.warmup_steps: must be in [0, 1000000000], got -1"},
      {{"train.betas=[1.0, 0.9]"}, "train.beta1: must be in [0, 1), got 1"},
      {{"train.beta2=-0.1"}, "train.beta2: must be in [0, 1), got -0.1"},
      {{"train.eps=0"}, "train.eps: must be > 0"},
      {{"train.weight_decay=-1"}, "train.weight_decay: must be >= 0"},
      // The ranges on the fields' own lines (job_spec.cc's ForEachField), ints and doubles.
      {{"train.ema.update_every=0"}, "train.ema.update_every: must be >= 1, got 0"},
      {{"validation.eta=nan"}, "validation.eta: must be a finite number, got nan"},
      {{"resources.rendezvous_timeout_seconds=0"},
       "resources.rendezvous_timeout_seconds: must be > 0, got 0"},
      {{"resources.hang_timeout_seconds=-1"}, "resources.hang_timeout_seconds: must be >= 0"},
      {{"resources.gpus_per_node=65"}, "resources.gpus_per_node: must be in [0, 64], got 65"},
      {{"train.lr_schedule=linear"},
       "train.lr_schedule: must be one of 'constant', 'cosine', got 'linear'"},
      {{"train.precision=fp16"},
       "train.precision: must be one of 'auto', 'fp32', 'bf16', got 'fp16'"},
      {{"train.beta_schedule=cosine"}, "train.beta_schedule: must be one of"},
      {{"train.prediction_type=sample"}, "train.prediction_type: must be one of"},
      {{"train.beta_start=0.1", "train.beta_end=0.01"},
       "train.beta_start: must be <= train.beta_end"},
      {{"train.beta_end=1"}, "train.beta_end: must be < 1"},
      {{"train.num_train_timesteps=1"}, "train.num_train_timesteps: must be >= 2"},
      {{"train.log_every=0"}, "train.log_every: must be >= 1"},
      {{"train.bucket_cap_mb=0"}, "train.bucket_cap_mb: must be > 0"},
      {{"train.bucket_dtype=fp16"}, "train.bucket_dtype: must be one of"},
      {{"train.attention=xformers"},
       "train.attention: must be one of 'auto', 'flash', 'efficient', 'cudnn', 'math', got "
       "'xformers'"},
      {{"checkpoint.enabled=maybe"}, "checkpoint.enabled"},
      {{"train.max_grad_norm=nan"}, "train.max_grad_norm: must be a finite number"},
      {{"train.lr=inf"}, "train.lr: must be a finite number"},
      {{"data.kind=frames"},
       "data.kind: must be one of 'synthetic', 'latents', 'video', got 'frames'"},
      {{"data.kind=video"}, "data.kind: 'video' is read by a preprocess job"},
      {{"kind=preprocess"}, "model.pretrained: required for kind 'preprocess'"},
      {{"train.caption_dropout=1"}, "train.caption_dropout: must be in [0, 1), got 1"},
      {{"data.kind=latents"}, "data.path: required for data.kind 'latents'"},
      {{"data.path=/x"}, "data.path: only used with data.kind 'latents'"},
      {{"data.frames=33"}, "data.frames: the tiny preset takes at most 32 frames, got 33"},
      {{"data.frames=0"}, "data.frames: must be in [1, 1024], got 0"},
      {{"data.frames=40"}, "got 40 (model.motion_max_frames extends its positional table)"},
      {{"model.motion_max_frames=2000"}, "model.motion_max_frames: must be in [0, 1024], got 2000"},
      {{"model.motion_max_frames=64", "model.lora.rank=4", "model.motion_adapter=/m"},
       "model.motion_max_frames: not with model.lora"},
      {{"data.height=15"}, "data.height: must be even for the tiny preset, got 15"},
      {{"data.num_samples=0"}, "data.num_samples: must be in [1, 10000000], got 0"},
      {{"model.motion_norm=group"},
       "model.motion_norm: must be one of 'auto', 'across_frames', 'per_frame', got 'group'"},
      {{"model.preset_layout=v4"},
       "model.preset_layout: must be one of 'v1', 'v2', 'v3', got 'v4'"},
      {{"model.preset=huge"}, "model.preset: must be one of 'tiny', 'sd15', got 'huge'"},
      {{"model.preset="}, "model: give a preset"},
      {{"model.unet2d=/m"}, "model.preset: 'tiny' cannot be combined"},
      {{"model.preset=", "model.unet2d=/a", "model.unet_motion=/b"},
       "model: give one of model.pretrained, model.unet2d (+ motion_adapter) or model.unet_motion, "
       "not several"},
      {{"model.preset=", "model.unet_motion=/b", "model.motion_adapter=/c"},
       "model.motion_adapter: '/c' needs model.pretrained, model.unet2d or a preset"},
      {{"resources.max_restarts=-1"}, "resources.max_restarts: must be in [0, 1000], got -1"},
      {{"resources.grace_seconds=-1"}, "resources.grace_seconds: must be >= 0"},
      // Sizes that cannot fit are refused at submit, not by a rank's allocation.
      {{"data.height=1000000"}, "data.height: must be in [1, 1024], got 1000000"},
      {{"data.text_len=1000000000"}, "data.text_len: must be in [1, 4096], got 1000000000"},
      {{"data.num_samples=100000000000"},
       "data.num_samples: must be in [1, 10000000], got 100000000000"},
      {{"validation.frames=100000"}, "validation.frames: must be in [1, 1024]"},
      {{"validation.height=65536"}, "validation.height: must be in [8, 8192]"},
      {{"data.height=1024", "data.width=1024", "train.batch_size=4096"},
       "train.batch_size x data.frames x data.height x data.width: one batch would hold"},
      {{"resources.rendezvous_timeout_seconds=0"},
       "resources.rendezvous_timeout_seconds: must be > 0"},
      {{"resources.hang_timeout_seconds=-5"}, "resources.hang_timeout_seconds: must be >= 0"},
      {{"name="}, "name: must be 1-63 characters"},
      {{"name=a/b"}, "name: must be 1-63 characters"},
  };
  for (const auto& c : cases) {
    Result<JobSpec> spec = ParseJobSpec(kTiny, c.overrides);
    ASSERT_FALSE(spec.ok()) << c.overrides[0];
    EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(spec.status().message(), HasSubstr(c.expected)) << c.overrides[0];
  }
}

TEST(JobSpecTest, Sd15WithAdapterIsValid) {
  Result<JobSpec> spec = ParseJobSpec(R"(
name: sd15-motion
model:
  unet2d: /models/sd15/unet
  motion_adapter: /models/animatediff-motion-adapter-v1-5-2
  motion_norm: auto
  gradient_checkpointing: true
data:
  kind: latents
  path: /data/webvid-latents
  frames: 16
  height: 64
  width: 64
  text_len: 77
train:
  max_steps: 5000
  batch_size: 2
  grad_accum: 4
  lr: 1e-4
  lr_schedule: cosine
  warmup_steps: 100
  precision: bf16
  beta_schedule: scaled_linear
resources:
  gpus: 8
)");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->GlobalBatch(), 64);
  EXPECT_EQ(spec->data.text_len, 77);
}

TEST(JobSpecTest, YamlRoundTrip) {
  JobSpec s;
  s.name = "round.trip_1";
  s.model.preset = ModelPreset::kNone;
  s.model.unet2d = "/a path/with \"quotes\" and \\ backslash";
  s.model.motion_adapter = "null";  // must stay a string
  s.model.motion_module_file = "123";
  s.model.gradient_checkpointing = GradientCheckpointing::kResnets;
  s.model.motion_norm = MotionNorm::kPerFrame;
  s.data.kind = DataKind::kLatents;
  s.data.path = "yes";
  s.data.seed = 1234567890123;
  s.train.lr = 0.1 + 0.2;  // not exactly representable in short decimal
  s.train.beta1 = 0.85;
  s.train.beta2 = 0.9995;
  s.train.eps = 1e-12;
  s.train.max_grad_norm = 0;
  s.train.bucket_cap_mb = 12.5;
  s.checkpoint.dir = "";
  s.validation.negative_prompt = "blurry, \"low\" quality";
  s.validation.at_steps = {3, 7};
  s.exports.formats = {"animatediff", "diffusers"};
  s.resources.priority = -7;
  s.resources.grace_seconds = 1.0 / 3.0;
  ASSERT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s).ToString();

  const std::string yaml = JobSpecToYaml(s);
  Result<JobSpec> back = ParseJobSpec(yaml);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << yaml;
  EXPECT_TRUE(back.value() == s) << yaml;
  EXPECT_EQ(JobSpecToYaml(back.value()), yaml);

  JobSpec defaults;
  defaults.model.preset = ModelPreset::kTiny;
  Result<JobSpec> back_defaults = ParseJobSpec(JobSpecToYaml(defaults));
  ASSERT_TRUE(back_defaults.ok());
  EXPECT_TRUE(back_defaults.value() == defaults);
  back_defaults->train.seed = 1;
  EXPECT_TRUE(back_defaults.value() != defaults);
}

TEST(JobSpecTest, ValidationAndExportSections) {
  Result<JobSpec> spec = ParseJobSpec(R"(
model: {pretrained: /models/sd15}
data: {kind: latents, path: /cache}
validation:
  prompts: ["a cat, walking", 'yes']
  every_steps: 0
  at_steps: [2, 50]
export: {formats: [animatediff]}
)");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->validation.prompts, (std::vector<std::string>{"a cat, walking", "yes"}));
  EXPECT_EQ(spec->validation.at_steps, (std::vector<int64_t>{2, 50}));
  EXPECT_EQ(spec->validation.steps, 25);
  EXPECT_EQ(spec->validation.guidance, 8.0);
  EXPECT_TRUE(spec->validation.set_alpha_to_one);
  EXPECT_EQ(spec->exports.formats, (std::vector<std::string>{"animatediff"}));
  EXPECT_EQ(spec->model.motion_norm, MotionNorm::kPerFrame);
  auto back = ParseJobSpec(JobSpecToYaml(*spec));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == *spec);

  struct Case {
    std::string yaml, expected;
  };
  const std::vector<Case> cases = {
      {"model: {preset: tiny}\nvalidation: {prompts: [a cat]}\n", "needs model.pretrained"},
      {"model: {pretrained: /m}\ndata: {kind: latents, path: /c}\nvalidation: {prompts: a cat}\n",
       "validation.prompts: expected a list"},
      {"model: {pretrained: /m}\ndata: {kind: latents, path: /c}\nvalidation: {prompts: [a, "
       "\"\"]}\n",
       "validation.prompts[1]: empty prompt"},
      {"model: {pretrained: /m}\ndata: {kind: latents, path: /c}\nvalidation: {prompts: [a], "
       "every_steps: 0, at_steps: []}\n",
       "never"},
      {"model: {preset: tiny}\nvalidation: {height: 100}\n",
       "validation.height: must be a multiple of 8"},
      {"model: {preset: tiny}\nvalidation: {at_steps: [3, x]}\n",
       "validation.at_steps[1]: expected an integer"},
      {"model: {preset: tiny}\nexport: {formats: [comfy]}\n",
       "export.formats[0]: must be one of 'diffusers', 'animatediff'"},
  };
  for (const auto& c : cases) {
    auto bad = ParseJobSpec(c.yaml);
    ASSERT_FALSE(bad.ok()) << c.yaml;
    EXPECT_THAT(bad.status().message(), HasSubstr(c.expected)) << c.yaml;
  }
}

TEST(JobSpecTest, EnumsParseToTypedValuesAndEmitTheirNames) {
  Result<JobSpec> spec = ParseJobSpec(
      kTiny, {"train.prediction_type=v_prediction", "train.beta_schedule=scaled_linear",
              "train.precision=bf16", "model.motion_norm=across_frames"});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->train.prediction_type, PredictionType::kVPrediction);
  EXPECT_EQ(spec->train.beta_schedule, BetaSchedule::kScaledLinear);
  EXPECT_EQ(ResolvePrecision(spec->train.precision, /*on_gpu=*/false), Precision::kBf16);
  EXPECT_EQ(ResolvePrecision(Precision::kAuto, /*on_gpu=*/true), Precision::kBf16);
  EXPECT_EQ(ResolvePrecision(Precision::kAuto, /*on_gpu=*/false), Precision::kFp32);
  EXPECT_EQ(spec->model.motion_norm, MotionNorm::kAcrossFrames);
  const std::string yaml = JobSpecToYaml(spec.value());
  EXPECT_THAT(yaml, HasSubstr("prediction_type: \"v_prediction\""));
  EXPECT_THAT(yaml, HasSubstr("beta_schedule: \"scaled_linear\""));
  EXPECT_EQ(Name(DataKind::kLatents), "latents");
}

TEST(JobSpecTest, CanonicalYamlHasEveryField) {
  JobSpec spec;  // the launcher fields are written when set
  spec.resources.launcher = LauncherKind::kSlurm;
  spec.resources.nodes = 2;
  spec.resources.gpus_per_node = 1;
  spec.resources.gpus = 2;
  spec.resources.slurm_account = "a";
  spec.resources.slurm_partition = "p";
  spec.resources.slurm_qos = "q";
  spec.resources.slurm_time_limit = "1:00:00";
  spec.resources.slurm_extra_args = {"--exclusive"};
  spec.model.lora.rank = 8;      // and the model.lora fields when a LoRA is asked for
  spec.eval.holdout_clips = 4;   // and the eval fields when an eval loss is
  spec.train.ema.decay = 0.999;  // the EMA's when it is on, and the weights when not raw
  spec.validation.weights = spec.eval.weights = spec.exports.weights = WeightsSource::kEma;
  spec.checkpoint.keep_best.k = 2;
  spec.model.motion_max_frames = 64;                 // and the stretched table when it is asked for
  spec.data.sources = {{"/c", 1, 0}};                // and data.sources when a mix is asked for
  spec.preprocess.buckets = {{64, 64, 8}};           // and preprocess.buckets when asked for
  spec.train.nan_policy = NanPolicy::kRollback;      // and the rollback's fields with that policy
  spec.notify.webhooks = {"https://example.com/h"};  // and notify when it names a URL
  // and preemption when it is asked for (not valid with slurm, but writing does not check)
  spec.resources.preemptible = spec.resources.allow_shrink = true;
  const std::string yaml = JobSpecToYaml(spec);
  for (const std::string& path : JobSpecFieldPaths()) {
    // Nested two spaces a level: "name", "  lr", "    rank".
    const size_t depth = static_cast<size_t>(std::count(path.begin(), path.end(), '.'));
    const std::string key = path.substr(path.rfind('.') + 1);
    EXPECT_THAT(yaml, HasSubstr("\n" + std::string(2 * depth, ' ') + key + ": ")) << path;
  }
}

TEST(JobSpecTest, DocumentationCoversEveryField) {
  std::ifstream in(std::string(ADCTL_REPO_ROOT) + "/docs/job-spec.md");
  ASSERT_TRUE(in) << "docs/job-spec.md missing";
  std::stringstream doc;
  doc << in.rdbuf();
  for (const std::string& path : JobSpecFieldPaths()) {
    EXPECT_THAT(doc.str(), HasSubstr("`" + path + "`")) << "docs/job-spec.md lacks " << path;
  }
}

// What the ETA adds for renders to come: every_steps multiples and at_steps, each step once.
TEST(JobSpecTest, ValidationsBetweenCountsTheRendersStillToCome) {
  ValidationSpec v;
  v.prompts = {"a cat"};
  v.every_steps = 500;
  v.at_steps = {2, 50, 1000};
  EXPECT_EQ(ValidationsBetween(v, 0, 2000), 6);  // 2, 50, 500, 1000, 1500, 2000
  EXPECT_EQ(ValidationsBetween(v, 50, 2000), 4);
  EXPECT_EQ(ValidationsBetween(v, 1999, 2000), 1);
  EXPECT_EQ(ValidationsBetween(v, 2000, 2000), 0);
  for (int64_t after = 0; after <= 2000; after += 37) {
    int64_t due = 0;
    for (int64_t step = after + 1; step <= 2000; ++step) due += ValidationDue(v, step);
    EXPECT_EQ(ValidationsBetween(v, after, 2000), due) << after;
  }
  v.every_steps = 0;
  EXPECT_EQ(ValidationsBetween(v, 0, 2000), 3);
  v.prompts.clear();
  EXPECT_EQ(ValidationsBetween(v, 0, 2000), 0);  // no validation section
}

TEST(JobSpecTest, LoadFile) {
  const std::string path = ::testing::TempDir() + "/job_spec_test.yaml";
  {
    std::ofstream out(path);
    out << kTiny;
  }
  Result<JobSpec> spec = LoadJobSpecFile(path, {"train.max_steps=7"});
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->train.max_steps, 7);

  {
    std::ofstream out(path);
    out << "model: {preset: tiny}\ntrain: {lr: -1}\n";
  }
  Result<JobSpec> bad = LoadJobSpecFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path));
  EXPECT_THAT(bad.status().message(), HasSubstr("train.lr"));

  Result<JobSpec> missing = LoadJobSpecFile("/nonexistent/spec.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/spec.yaml"));
}

}  // namespace
}  // namespace adctl
