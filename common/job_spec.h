// The job spec: what a user submits (YAML, docs/job-spec.md documents every field).
//
// Parsed and validated in one place, used by adctld (validate at submit, resources, restart
// policy) and by adworker (model, data, training). Validation errors name the field:
// "train.lr: must be > 0, got -1". Plain value types; thread-compatible. No Torch here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace adctl {

// The spec's enumerations. Each has one name table (SpecEnumNames): the parser accepts exactly
// those names (anything else is an error naming the field and the allowed names), the canonical
// YAML writes them, and code switches on the values.
enum class JobKind { kTrain, kPreprocess };
enum class ModelPreset { kNone, kTiny, kSd15 };  // "" (paths given), "tiny", "sd15"
enum class PresetLayout { kV1, kV2, kV3 };
enum class MotionNorm { kAuto, kAcrossFrames, kPerFrame };
enum class DataKind { kSynthetic, kLatents, kVideo };
enum class CacheDtype { kBf16, kFp16 };  // preprocess.dtype
enum class LrSchedule { kConstant, kCosine };
enum class Precision { kAuto, kFp32, kBf16 };
enum class AttentionKernel { kAuto, kFlash, kEfficient, kCudnn, kMath };
enum class BetaSchedule { kLinear, kScaledLinear, kPretrained };
enum class PredictionType { kEpsilon, kVPrediction };
enum class BucketDtype { kFp32, kBf16 };
// model.gradient_checkpointing: what the backward pass recomputes instead of keeping.
enum class GradientCheckpointing { kNone, kResnets, kFull };
// model.lora.scope: which attention layers carry adapters.
enum class LoraScope { kMotion, kSpatial, kBoth };
// resources.launcher: "" (adctld's default launcher), "local", "slurm". adctld registers one
// launcher per kind it runs (server/launcher/launchers.h).
enum class LauncherKind { kDefault, kLocal, kSlurm };
enum class WindowPlacement { kRandom, kUniform };               // preprocess.window_placement
enum class EmaDevice { kGpu, kCpu };                            // train.ema.device
enum class NanPolicy { kFail, kRollback };                      // train.nan_policy
enum class KeepBestMetric { kEvalLoss };                        // checkpoint.keep_best.metric
enum class TimestepSpacing { kLeading, kTrailing, kLinspace };  // validation.timestep_spacing
// validation.weights, eval.weights, export.weights: the trained weights or train.ema's average.
enum class WeightsSource { kRaw, kEma };

template <typename E>
struct SpecEnumName {
  E value;
  const char* name;
};
// The name table of each enum, in the order error messages list them. The argument only picks
// the table.
const std::vector<SpecEnumName<JobKind>>& SpecEnumNames(JobKind);
const std::vector<SpecEnumName<ModelPreset>>& SpecEnumNames(ModelPreset);
const std::vector<SpecEnumName<PresetLayout>>& SpecEnumNames(PresetLayout);
const std::vector<SpecEnumName<MotionNorm>>& SpecEnumNames(MotionNorm);
const std::vector<SpecEnumName<DataKind>>& SpecEnumNames(DataKind);
const std::vector<SpecEnumName<CacheDtype>>& SpecEnumNames(CacheDtype);
const std::vector<SpecEnumName<LrSchedule>>& SpecEnumNames(LrSchedule);
const std::vector<SpecEnumName<Precision>>& SpecEnumNames(Precision);
const std::vector<SpecEnumName<AttentionKernel>>& SpecEnumNames(AttentionKernel);
const std::vector<SpecEnumName<BetaSchedule>>& SpecEnumNames(BetaSchedule);
const std::vector<SpecEnumName<PredictionType>>& SpecEnumNames(PredictionType);
const std::vector<SpecEnumName<BucketDtype>>& SpecEnumNames(BucketDtype);
const std::vector<SpecEnumName<GradientCheckpointing>>& SpecEnumNames(GradientCheckpointing);
const std::vector<SpecEnumName<LoraScope>>& SpecEnumNames(LoraScope);
const std::vector<SpecEnumName<LauncherKind>>& SpecEnumNames(LauncherKind);
const std::vector<SpecEnumName<WindowPlacement>>& SpecEnumNames(WindowPlacement);
const std::vector<SpecEnumName<EmaDevice>>& SpecEnumNames(EmaDevice);
const std::vector<SpecEnumName<NanPolicy>>& SpecEnumNames(NanPolicy);
const std::vector<SpecEnumName<KeepBestMetric>>& SpecEnumNames(KeepBestMetric);
const std::vector<SpecEnumName<TimestepSpacing>>& SpecEnumNames(TimestepSpacing);
const std::vector<SpecEnumName<WeightsSource>>& SpecEnumNames(WeightsSource);

// The spec's name of `value` ("v_prediction").
template <typename E>
std::string Name(E value) {
  for (const SpecEnumName<E>& e : SpecEnumNames(value)) {
    if (e.value == value) return e.name;
  }
  return "?";
}

// The value the spec's name `name` stands for (Name's inverse); nullopt for an unknown name.
// For names read from elsewhere that share the spec's (a diffusers scheduler config).
template <typename E>
std::optional<E> SpecEnumValue(const std::string& name) {
  for (const SpecEnumName<E>& e : SpecEnumNames(E{})) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

// train.precision as it applies on this device: kAuto is bf16 on a GPU and fp32 on a CPU.
inline Precision ResolvePrecision(Precision precision, bool on_gpu) {
  if (precision != Precision::kAuto) return precision;
  return on_gpu ? Precision::kBf16 : Precision::kFp32;
}

// model.lora: train a low-rank adapter (LoRA) on the attention projections instead of the whole
// motion modules (docs/lora.md). PEFT's math, y = W x + (alpha / rank) · B (A x); the base
// model, motion module included, stays frozen.
struct LoraSpec {
  int64_t rank = 0;                  // 0: no LoRA (the whole motion modules train)
  double alpha = 0;                  // 0: = rank (scale 1)
  std::vector<std::string> targets;  // projections: to_q, to_k, to_v, to_out.0 (empty: all four)
  LoraScope scope = LoraScope::kMotion;  // motion modules; spatial transformers; both
  std::string init_from;  // a LoRA file (diffusers' or AnimateDiff's layout) to continue from
  double dropout = 0;     // on the adapters' input while training (PEFT's lora_dropout)
  bool enabled() const { return rank > 0; }
};

// model.lora.targets when empty: every attention projection (what AnimateDiff's MotionLoRAs
// cover).
inline const std::vector<std::string>& DefaultLoraTargets() {
  static const std::vector<std::string> kTargets = {"to_q", "to_k", "to_v", "to_out.0"};
  return kTargets;
}

struct ModelSpec {
  // Either a preset ("tiny": random init, small channels, written in diffusers format into the
  // job directory) or paths. With paths: `unet2d` + optional `motion_adapter` (absent: new
  // motion modules, proj_out zero-initialised), or `unet_motion` (combined directory).
  ModelPreset preset = ModelPreset::kNone;  // sd15: SD1.5 shapes, random (benchmarks)
  // A diffusers Stable Diffusion folder (unet/, vae/, text_encoder/, tokenizer/, scheduler/),
  // as users download it (fp16 variants too). Training uses its unet/; preprocessing its vae/,
  // text_encoder/ and tokenizer/.
  std::string pretrained;
  std::string unet2d;              // diffusers UNet2DConditionModel directory
  std::string motion_adapter;      // diffusers MotionAdapter directory
  std::string unet_motion;         // diffusers UNetMotionModel directory
  std::string motion_module_file;  // original AnimateDiff safetensors (optional, overrides adapter)
  // Motion-module GroupNorm scope: kPerFrame (original AnimateDiff: every released module was
  // trained so, and ComfyUI/A1111 run them so), kAcrossFrames (diffusers normalises over all
  // frames of a clip), kAuto (what the loaded module records, else its format's convention).
  MotionNorm motion_norm = MotionNorm::kPerFrame;
  // Activations the backward pass recomputes: none; the ResNet blocks of the down and up blocks
  // (diffusers' granularity); or every down/up ResNet, transformer and motion module (full,
  // AnimateDiff's). `true` / `false` are accepted for full / none.
  GradientCheckpointing gradient_checkpointing = GradientCheckpointing::kNone;
  // Presets only: motion-module layout "v2" (mid-block module) or "v1"/"v3" (none).
  PresetLayout preset_layout = PresetLayout::kV2;
  // Frames the motion modules take, beyond their positional table's length (32 for released
  // modules): the table is linearly interpolated to this many positions once the model is
  // loaded (a change to the module, which its checkpoints and exports keep). 0: the table as is.
  int64_t motion_max_frames = 0;
  LoraSpec lora;
};

// One latent cache of a mix (data.sources): `weight` (its share of the draws, relative to the
// other sources' weights) or `repeats` (passes over its clips per epoch; 1 when neither is set).
// A mix gives every source a weight or none.
struct DataSource {
  std::string path;
  double weight = 0;    // 0: not set
  int64_t repeats = 0;  // 0: not set
  bool operator==(const DataSource& o) const {
    return path == o.path && weight == o.weight && repeats == o.repeats;
  }
};

struct DataSpec {
  // synthetic | latents (a cache written by a preprocess job) | video (preprocess only)
  DataKind kind = DataKind::kSynthetic;
  std::string path;  // latents: directory of *.safetensors shards
  // latents: several caches mixed by weight or repeats (instead of `path`; docs/real-data.md).
  std::vector<DataSource> sources;
  // synthetic source: generated deterministically from `seed`.
  int64_t num_samples = 64;
  int64_t frames = 8;
  int64_t height = 16;   // latent height
  int64_t width = 16;    // latent width
  int64_t text_len = 8;  // text tokens per clip
  int64_t seed = 0;
  // video: a WebVid-style CSV of captions and a folder of video files.
  std::string csv;                      // the caption CSV
  std::string video_dir;                // folder of the video files
  std::string id_column = "videoid";    // CSV column naming the file
  std::string caption_column = "name";  // CSV column with the caption
  // File path under video_dir; {column} is that CSV column's value ("{page_dir}/{videoid}.mp4").
  std::string file_pattern = "{videoid}.mp4";
  int64_t stride = 4;           // frames between sampled frames (AnimateDiff's rule)
  int64_t sample_height = 256;  // pixels after resize + center crop
  int64_t sample_width = 256;
};

// One shape bucket of a preprocess job (preprocess.buckets): pixel width × height after resize
// and centre crop, and frames a clip.
struct PreprocessBucket {
  int64_t width = 0;
  int64_t height = 0;
  int64_t frames = 0;
  bool operator==(const PreprocessBucket& o) const {
    return width == o.width && height == o.height && frames == o.frames;
  }
};

// Turning videos into a latent cache (kind: preprocess).
struct PreprocessSpec {
  std::string output;       // cache directory (required); train with data.kind: latents
  int64_t shard_size = 32;  // clips per shard: the unit of work and of resume
  CacheDtype dtype = CacheDtype::kBf16;  // on-disk latent statistics and text states
  int64_t decode_threads = 4;            // videos decoded in parallel per rank
  int64_t vae_chunk = 16;                // frames per VAE encoder call
  int64_t min_frames = 1;                // shorter videos are skipped (counted as too_short)
  int64_t max_clips = 0;                 // 0: every CSV row; else the first N rows
  // Clips per video: k windows of data.frames frames (worker/video/frame_sampling.h,
  // WindowStarts), each a clip of the cache; random: AnimateDiff's start rule, seeded per
  // window; uniform: evenly spaced over the video.
  int64_t windows_per_video = 1;
  WindowPlacement window_placement = WindowPlacement::kRandom;
  // Also store each clip's horizontally flipped latents (the frames flipped before encoding);
  // training draws one of the two per draw.
  bool flip = false;
  // Shape buckets: each video goes to the bucket of the nearest aspect ratio and is resized and
  // centre-cropped to its size, windows of its frames. The cache holds one sub-cache a bucket
  // (worker/data/latent_cache.h); training draws each batch from one. Empty: one shape,
  // data.sample_width × sample_height × frames.
  std::vector<PreprocessBucket> buckets;
};

// An exponential moving average of the trained weights (worker/train/ema.h) by diffusers
// EMAModel's rule: the k-th update (at training step k * update_every) moves the average
// toward the weights by 1 - d_k, with d_k = min(decay, (1 + n) / (10 + n)),
// n = k - start_step / update_every - 1, and d_k = 0 (a copy) while n <= 0. Full modules and
// LoRA adapters alike. Active when decay > 0.
struct EmaSpec {
  double decay = 0;          // the cap, in [0, 1) (diffusers' default 0.9999); 0: no EMA
  int64_t start_step = 0;    // diffusers' update_after_step, in training steps
  int64_t update_every = 1;  // training steps between updates
  EmaDevice device =
      EmaDevice::kGpu;  // gpu: beside the weights; cpu: host memory (copies each update)
  bool enabled() const { return decay > 0; }
};

struct TrainSpec {
  int64_t max_steps = 20;  // optimizer steps
  int64_t batch_size = 1;  // clips per rank per micro-step
  int64_t grad_accum = 1;  // micro-steps per optimizer step
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 1e-2;
  double eps = 1e-8;
  LrSchedule lr_schedule = LrSchedule::kConstant;
  int64_t warmup_steps = 0;
  double max_grad_norm = 1.0;  // <= 0 disables clipping
  // A loss or gradient norm that turns NaN/Inf: "fail" (exit 6, never retried: the noise is
  // seeded by the data position, so a retry meets the same NaN) or "rollback" (the job restarts
  // from its newest checkpoint with the learning rate × rollback_lr_factor, compounding, at most
  // max_rollbacks times; each rollback is one of resources.max_restarts).
  NanPolicy nan_policy = NanPolicy::kFail;
  double rollback_lr_factor = 0.5;
  int64_t max_rollbacks = 3;
  // Probability of training a clip on the empty caption (AnimateDiff's cfg_random_null_text
  // ratio); needs a cache that stores the empty caption's text state.
  double caption_dropout = 0.1;
  int64_t seed = 42;
  Precision precision = Precision::kAuto;  // auto: bf16 on GPU, fp32 on CPU
  // Attention kernels (LibTorch 2.x): "auto" (LibTorch's choice) | "flash" | "efficient" |
  // "cudnn" | "math".
  AttentionKernel attention = AttentionKernel::kAuto;
  // Capture a training micro-step as a CUDA graph and replay it (worker/train/step_graph.h):
  // one GPU, LibTorch 2.x; ignored, with an event saying so, elsewhere.
  bool cuda_graphs = false;
  // Let cuDNN time its convolution algorithms on each new shape and keep the fastest
  // (torch.backends.cudnn.benchmark); off: its heuristic's first choice. GPUs only. Off by
  // default: on an H200 it gained under 0.5 % and cost 6–28 s before the first step
  // (bench/results/cudnn_autotune_h200_20261202.md).
  bool cudnn_benchmark = false;
  // The UNet's GroupNorm + SiLU, GEGLU and short-sequence attention as fused CUDA kernels of
  // our own (worker/kernels/, one op a file) instead of LibTorch's separate ones. GPUs with the
  // CUDA build only; the CPU and the CPU build always use LibTorch's composition.
  bool fused_kernels = true;
  // "linear" | "scaled_linear" | "pretrained" (model.pretrained's scheduler/scheduler_config.json
  // gives the schedule, betas, timesteps and prediction type)
  BetaSchedule beta_schedule = BetaSchedule::kLinear;
  double beta_start = 0.00085;
  double beta_end = 0.012;
  int64_t num_train_timesteps = 1000;
  PredictionType prediction_type = PredictionType::kEpsilon;
  int64_t log_every = 1;
  // Data-parallel gradient buckets (worker/dist).
  double bucket_cap_mb = 25;
  BucketDtype bucket_dtype = BucketDtype::kFp32;
  EmaSpec ema;
};

// checkpoint.keep_best: the k committed checkpoints with the lowest `metric` (recorded in each
// checkpoint's manifest at the step it was measured) survive retention. A checkpoint is written
// at every eval step while k > 0.
struct KeepBestSpec {
  KeepBestMetric metric = KeepBestMetric::kEvalLoss;
  int64_t k = 0;  // 0: off
};

struct CheckpointSpec {
  bool enabled = true;       // false: never write one (benchmarks, smoke tests)
  std::string dir;           // "" → <job dir>/checkpoints
  int64_t every_steps = 10;  // 0: only at the end
  int64_t keep_last = 3;
  // Retention spares besides the newest keep_last: every keep_every-th step (0: none), and the
  // step of each validation sample (a checkpoint is written there when every_steps misses it).
  // Pinned steps (`adctl ckpt pin`) are spared too.
  int64_t keep_every = 0;
  bool keep_at_validation = false;
  KeepBestSpec keep_best;
};

// Sample videos rendered during training (rank 0, with the current motion modules), as
// AnimateDiff's trainer does: DDIM with classifier-free guidance, decoded by model.pretrained's
// VAE. Active when `prompts` is not empty.
struct ValidationSpec {
  std::vector<std::string> prompts;
  std::string negative_prompt;  // "" : the empty caption
  int64_t steps = 25;           // DDIM steps
  double guidance = 8.0;        // classifier-free guidance scale (<= 1: none)
  int64_t seed = 42;            // initial latents: the same at every validation step
  int64_t frames = 16;
  int64_t height = 256;  // pixels
  int64_t width = 256;
  int64_t every_steps = 5000;            // 0: only at_steps (and never at the end)
  std::vector<int64_t> at_steps{2, 50};  // extra steps (AnimateDiff: 2 and 50)
  double eta = 0;
  bool set_alpha_to_one = true;  // AnimateDiff's validation scheduler
  TimestepSpacing timestep_spacing = TimestepSpacing::kLeading;
  int64_t steps_offset = 1;
  int64_t fps = 8;                              // MP4 and GIF frame rate (AnimateDiff's GIFs: 8)
  int64_t decode_chunk = 16;                    // frames per VAE decode call
  WeightsSource weights = WeightsSource::kRaw;  // raw | ema (train.ema's average)
};

// Whether the validation section renders after `step` finished steps (every_steps, at_steps).
bool ValidationDue(const ValidationSpec& spec, int64_t step);
// How many validations render after steps in (after, upto]: what is left of a job's renders.
int64_t ValidationsBetween(const ValidationSpec& spec, int64_t after, int64_t upto);

// Motion modules written at the end of a job for the inference tools (adctl export does the
// same on demand): "diffusers" (MotionAdapter folder) and/or "animatediff" (one .safetensors
// file with the original key names, as ComfyUI and A1111 load).
struct ExportSpec {
  std::vector<std::string> formats;
  WeightsSource weights = WeightsSource::kRaw;  // raw | ema (train.ema's average)
};

struct ResourceSpec {
  int64_t gpus = 1;           // ranks: GPUs, or CPU slots when the coordinator has no GPU
  int64_t priority = 0;       // higher first; FIFO within a priority
  int64_t max_restarts = 3;   // attempts after the first, for retryable exits only
  double grace_seconds = 60;  // cancel/pause: SIGTERM → wait → SIGKILL
  double rendezvous_timeout_seconds = 120;
  double hang_timeout_seconds = 0;  // 0: off; no progress for this long fails the attempt
  double peak_tflops = 0;           // dense bf16 peak of one GPU for MFU; 0: by the GPU's name
  // Where the ranks run (docs/job-spec.md, "resources"): kDefault = adctld's default launcher,
  // local = processes on adctld's host, slurm = one Slurm batch job per attempt.
  LauncherKind launcher = LauncherKind::kDefault;
  int64_t nodes = 1;          // slurm: nodes of the batch job; ranks per node = gpus / nodes
  int64_t gpus_per_node = 0;  // slurm: 0 = gpus / nodes; else gpus must be nodes × this
  // slurm: sbatch's --account, --partition, --qos, --time ("" = adctld's --slurm-* default)
  std::string slurm_account;
  std::string slurm_partition;
  std::string slurm_qos;
  std::string slurm_time_limit;
  std::vector<std::string> slurm_extra_args;  // more sbatch flags, after adctld's own
  // Preemption (docs/queue.md): a higher-priority job that cannot otherwise fit may pause this
  // one (a checkpoint within grace_seconds); it goes back to the queue by itself and resumes
  // from that checkpoint. With allow_shrink it may resume on fewer ranks than `gpus` when the
  // global batch still divides (train.grad_accum recomputed). Local launcher only.
  bool preemptible = false;
  bool allow_shrink = false;
};

// Who is told when the job ends or its validation samples are ready (docs/notifications.md):
// JSON POSTs from adctld, besides those of adctld's own --webhook. The coordinator's business:
// a rank's copy of the spec has them cleared (a URL may carry a token).
struct NotifySpec {
  std::vector<std::string> webhooks;  // http:// or https:// URLs
};

// The launcher fields above are the coordinator's business: the canonical YAML writes them only
// when set, and a rank's copy of the spec has them cleared (so a worker built before they
// existed reads it).
void ClearLauncherFields(ResourceSpec* resources);

// Eval loss on held-out clips (worker/train/evaluator.h): a number that depends only on the
// weights. Active when `holdout_clips` > 0 or `path` is set.
struct EvalSpec {
  int64_t holdout_clips = 0;  // clips of `data` held out (never trained on), drawn by `seed`
  std::string path;           // or a latent cache of eval clips of its own
  std::vector<int64_t> timesteps = {100, 300, 500, 700, 900};
  int64_t every_steps = 500;  // and at the last step
  int64_t seed = 0;           // the held-out draw and every (clip, timestep) noise
  WeightsSource weights = WeightsSource::kRaw;  // raw | ema (train.ema's average)
  bool enabled() const { return holdout_clips > 0 || !path.empty(); }
};

struct JobSpec {
  std::string name = "job";
  JobKind kind = JobKind::kTrain;  // preprocess: videos → latent cache
  ModelSpec model;
  DataSpec data;
  PreprocessSpec preprocess;
  TrainSpec train;
  CheckpointSpec checkpoint;
  ValidationSpec validation;
  EvalSpec eval;
  ExportSpec exports;  // the `export` section
  ResourceSpec resources;
  NotifySpec notify;

  // Global batch in clips per optimizer step = batch_size × grad_accum × ranks.
  int64_t GlobalBatch() const { return train.batch_size * train.grad_accum * resources.gpus; }
};

// The largest job spec (bytes) adctld takes.
constexpr size_t kMaxSpecBytes = 1 << 20;

// Parses YAML text, applies `overrides` ("train.lr=3e-4", dotted paths into the same tree)
// and validates. Unknown keys are errors (a typo must not silently train with defaults).
Result<JobSpec> ParseJobSpec(const std::string& yaml_text,
                             const std::vector<std::string>& overrides = {});
Result<JobSpec> LoadJobSpecFile(const std::string& path,
                                const std::vector<std::string>& overrides = {});
// Checks ranges and combinations; returns the first problem, naming the field.
// The trained motion module a LoRA adapts: model.motion_module_file, else model.motion_adapter,
// else model.unet_motion (the order LoadUNet3D gives them precedence in).
std::string LoraBaseMotionModule(const ModelSpec& model);

// What a job trains, for people (adctl describe, the web page, adctl_job_info): "motion
// modules", "preprocessing" or "MotionLoRA rank R, alpha A (targets; scope S) on <base>".
std::string TrainsSummary(const JobSpec& spec);

Status ValidateJobSpec(const JobSpec& spec);

// What a rank's copy of a spec leaves out: the launcher fields (ClearLauncherFields) and
// `notify` (the coordinator's business; a webhook URL may carry a token).
void ClearCoordinatorFields(JobSpec* spec);

// `spec` on `ranks` ranks with its global batch kept: train.grad_accum recomputed and
// resources.gpus set (resume --gpus, a preempted job shrinking). InvalidArgument naming `field`
// when batch_size × ranks does not divide the global batch.
Result<JobSpec> WithRankCount(const JobSpec& spec, int64_t ranks, const std::string& field);

// InvalidArgument naming `field` unless `url` is an http:// or https:// URL with a host, no
// spaces or control characters, at most 2048 bytes (notify.webhooks, adctld --webhook).
Status CheckWebhookUrl(const std::string& field, const std::string& url);

// The longest grace period (seconds) a spec, a cancel or a pause may give a job's ranks to
// checkpoint and exit before SIGKILL: a day.
constexpr double kMaxGraceSeconds = 86400;
// InvalidArgument naming `field` unless `seconds` is a number in [0, kMaxGraceSeconds]
// (NaN, infinity and 1e300 are refused, not wrapped into a negative int).
Status CheckGraceSeconds(const std::string& field, double seconds);
// Canonical YAML of a spec (every field, so a stored spec is self-contained).
std::string JobSpecToYaml(const JobSpec& spec);

// Field-by-field equality (doubles compared exactly): ParseJobSpec(JobSpecToYaml(s)) == s.
bool operator==(const JobSpec& a, const JobSpec& b);
inline bool operator!=(const JobSpec& a, const JobSpec& b) { return !(a == b); }
// Dotted path of every key of the canonical YAML, in its order ("name", "model.preset", ...,
// "train.betas", ...). The parser also accepts "train.beta1" and "train.beta2".
std::vector<std::string> JobSpecFieldPaths();

}  // namespace adctl
