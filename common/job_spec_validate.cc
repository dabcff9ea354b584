// Job spec validation: ValidateJobSpec, section by section, and the checks the coordinator
// applies to single fields (grace periods, webhook URLs). Every refusal names the field and
// what it got (docs/job-spec.md lists the bounds). Parsing and emission: job_spec.cc.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/job_spec_internal.h"

namespace adctl {

namespace {

using job_spec_internal::Bound;
using job_spec_internal::FirstInvalidUtf8;
using job_spec_internal::FormatDouble;
using job_spec_internal::kMaxBatchLatents;
using job_spec_internal::kMaxFrames;
using job_spec_internal::kMaxLatentSide;

// ---- Validation helpers ----------------------------------------------------------------------

std::string Show(const std::string& v) { return "'" + v + "'"; }
std::string Show(int64_t v) { return std::to_string(v); }
std::string Show(double v) { return FormatDouble(v); }

// The list-valued and free-form string fields that name one of a few choices.
Status OneOf(const char* path, const std::string& value,
             std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return Status::Ok();
    list += std::string(list.empty() ? "" : ", ") + "'" + a + "'";
  }
  return InvalidArgument(std::string(path) + ": must be one of " + list + ", got " + Show(value));
}

template <typename T>
Status AtLeast(const char* path, T value, T minimum) {
  if (value >= minimum) return Status::Ok();
  return InvalidArgument(std::string(path) + ": must be >= " + Show(minimum) + ", got " +
                         Show(value));
}

// [minimum, maximum]: sane bounds, so a typo or a hostile number cannot wrap or overflow later
// (a priority past int32, a grace period of 1e300 seconds).
template <typename T>
Status Within(const char* path, T value, T minimum, T maximum) {
  if (value >= minimum && value <= maximum) return Status::Ok();
  return InvalidArgument(std::string(path) + ": must be in [" + Show(minimum) + ", " +
                         Show(maximum) + "], got " + Show(value));
}

Status Finite(const char* path, double value) {
  if (std::isfinite(value)) return Status::Ok();
  return InvalidArgument(std::string(path) + ": must be a finite number, got " + Show(value));
}

Status Positive(const char* path, double value) {
  ADCTL_RETURN_IF_ERROR(Finite(path, value));
  if (value > 0) return Status::Ok();
  return InvalidArgument(std::string(path) + ": must be > 0, got " + Show(value));
}

Status NonNegative(const char* path, double value) {
  ADCTL_RETURN_IF_ERROR(Finite(path, value));
  return AtLeast(path, value, 0.0);
}

// [0, 1): Adam's moment decay rates.
Status UnitInterval(const char* path, double value) {
  if (value >= 0 && value < 1) return Status::Ok();
  return InvalidArgument(std::string(path) + ": must be in [0, 1), got " + Show(value));
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 63) return false;
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

// Frames the tiny preset's motion modules can take (positional encoding length, as in the
// reference MotionAdapter's max_seq_length 32).
constexpr int64_t kTinyMaxFrames = 32;

}  // namespace

namespace job_spec_internal {

template <typename T>
Status CheckBoundOf(const char* path, T value, const Bound& bound) {
  switch (bound.kind) {
    case Bound::Kind::kAtLeast:
      return AtLeast(path, value, static_cast<T>(bound.min));
    case Bound::Kind::kWithin:
      return Within(path, value, static_cast<T>(bound.min), static_cast<T>(bound.max));
    case Bound::Kind::kPositive:
      return Positive(path, static_cast<double>(value));
    case Bound::Kind::kNonNegative:
      return NonNegative(path, static_cast<double>(value));
  }
  return Status::Ok();
}

Status CheckBound(const char* path, int64_t value, const Bound& bound) {
  return CheckBoundOf(path, value, bound);
}

Status CheckBound(const char* path, double value, const Bound& bound) {
  return CheckBoundOf(path, value, bound);
}

}  // namespace job_spec_internal

Status CheckGraceSeconds(const std::string& field, double seconds) {
  ADCTL_RETURN_IF_ERROR(NonNegative(field.c_str(), seconds));
  return Within(field.c_str(), seconds, 0.0, kMaxGraceSeconds);
}

namespace {

// model.lora: its own numbers, and a base whose motion modules are trained (a LoRA on random
// ones learns nothing a user can load).
// preprocess.buckets: at most 16, each side a multiple of 8 (the VAE's factor), frames in
// range, no two alike.
Status ValidateBuckets(const std::vector<PreprocessBucket>& buckets) {
  if (buckets.size() > 16) {
    return InvalidArgument("preprocess.buckets: at most 16 buckets, got " +
                           std::to_string(buckets.size()));
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    const PreprocessBucket& b = buckets[i];
    const std::string at = "preprocess.buckets[" + std::to_string(i) + "]";
    for (auto [key, v] : {std::pair{".width", b.width}, std::pair{".height", b.height}}) {
      if (v < 8 || v % 8 != 0 || v > 8 * kMaxLatentSide) {
        return InvalidArgument(at + key + ": must be a multiple of 8 in [8, " +
                               std::to_string(8 * kMaxLatentSide) + "], got " + Show(v));
      }
    }
    ADCTL_RETURN_IF_ERROR(Within<int64_t>((at + ".frames").c_str(), b.frames, 1, kMaxFrames));
    for (size_t j = 0; j < i; ++j) {
      if (buckets[j] == b) {
        return InvalidArgument(at + ": the same bucket as preprocess.buckets[" + std::to_string(j) +
                               "]");
      }
    }
  }
  return Status::Ok();
}

// data.sources: latent caches only, each a path with a weight or repeats, all weighted or none.
Status ValidateSources(const DataSpec& d) {
  if (d.kind != DataKind::kLatents) {
    return InvalidArgument("data.sources: only used with data.kind 'latents', got kind " +
                           Show(Name(d.kind)));
  }
  if (!d.path.empty()) {
    return InvalidArgument(
        "data.path and data.sources: give one (data.path for one cache, data.sources for a mix), "
        "not both");
  }
  if (d.sources.size() > 64) {
    return InvalidArgument("data.sources: at most 64 sources, got " +
                           std::to_string(d.sources.size()));
  }
  int weighted = -1, unweighted = -1;
  for (size_t i = 0; i < d.sources.size(); ++i) {
    const DataSource& src = d.sources[i];
    const std::string at = "data.sources[" + std::to_string(i) + "]";
    if (src.path.empty()) return InvalidArgument(at + ".path: required (a latent cache)");
    for (size_t j = 0; j < i; ++j) {
      if (d.sources[j].path == src.path) {
        return InvalidArgument(at + ".path: the same cache as data.sources[" + std::to_string(j) +
                               "] (raise its weight or repeats instead)");
      }
    }
    if (src.weight != 0 && src.repeats != 0) {
      return InvalidArgument(at + ": give weight or repeats, not both");
    }
    if (src.weight != 0 && !(src.weight > 0 && src.weight <= 1e6)) {
      return InvalidArgument(at + ".weight: must be in (0, 1e6], got " + Show(src.weight));
    }
    if (src.repeats != 0) {
      ADCTL_RETURN_IF_ERROR(Within<int64_t>((at + ".repeats").c_str(), src.repeats, 1, 1000));
    }
    (src.weight != 0 ? weighted : unweighted) = static_cast<int>(i);
  }
  if (weighted >= 0 && unweighted >= 0) {
    return InvalidArgument("data.sources[" + std::to_string(unweighted) +
                           "]: no weight, and data.sources[" + std::to_string(weighted) +
                           "] has one: give every source a weight (its share of the draws) or "
                           "none (repeats: passes over its clips per epoch)");
  }
  return Status::Ok();
}

Status ValidateLora(const ModelSpec& m, bool preprocess) {
  const LoraSpec& l = m.lora;
  if (!l.enabled()) {
    if (l.rank < 0) return InvalidArgument("model.lora.rank: must be >= 1, got " + Show(l.rank));
    const bool other_fields = l.alpha != 0 || !l.targets.empty() || !l.init_from.empty() ||
                              l.dropout != 0 || l.scope != LoraScope::kMotion;
    if (other_fields)
      return InvalidArgument("model.lora: set model.lora.rank (>= 1) to train a LoRA");
    return Status::Ok();
  }
  if (preprocess) return InvalidArgument("model.lora: a preprocess job trains nothing");
  ADCTL_RETURN_IF_ERROR(Within("model.lora.rank", l.rank, int64_t{1}, int64_t{1024}));
  if (!(l.alpha >= 0) || l.alpha > 1e6) {
    return InvalidArgument("model.lora.alpha: must be in [0, 1e6] (0: the rank), got " +
                           Show(l.alpha));
  }
  if (!(l.dropout >= 0 && l.dropout < 1)) {
    return InvalidArgument("model.lora.dropout: must be in [0, 1), got " + Show(l.dropout));
  }
  for (const std::string& t : l.targets) {
    ADCTL_RETURN_IF_ERROR(OneOf("model.lora.targets", t, {"to_q", "to_k", "to_v", "to_out.0"}));
  }
  if (m.preset != ModelPreset::kNone && m.motion_adapter.empty() && m.motion_module_file.empty()) {
    return InvalidArgument("model.lora: preset " + Show(Name(m.preset)) +
                           " has random motion modules; a LoRA adapts a trained one (give "
                           "model.unet_motion, or model.pretrained with model.motion_adapter or "
                           "model.motion_module_file)");
  }
  if (m.unet_motion.empty() && m.motion_adapter.empty() && m.motion_module_file.empty()) {
    return InvalidArgument(
        "model.lora: needs a trained motion module to adapt: model.motion_adapter or "
        "model.motion_module_file (or model.unet_motion)");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateJobSpec(const JobSpec& s) {
  if (!ValidName(s.name)) {
    return InvalidArgument(
        "name: must be 1-63 characters of letters, digits, '-', '_' or '.', got " + Show(s.name));
  }

  // Every number field's own range (its line in job_spec.cc's ForEachField).
  ADCTL_RETURN_IF_ERROR(job_spec_internal::CheckFieldBounds(s));

  const bool preprocess = s.kind == JobKind::kPreprocess;

  // model
  const ModelSpec& m = s.model;
  const int unet_sources = !m.pretrained.empty() + !m.unet2d.empty() + !m.unet_motion.empty();
  const bool has_paths = unet_sources > 0;
  if (preprocess) {
    if (m.pretrained.empty()) {
      return InvalidArgument(
          "model.pretrained: required for kind 'preprocess' (a Stable Diffusion folder with vae/, "
          "text_encoder/ and tokenizer/)");
    }
  } else if ((m.preset == ModelPreset::kNone) == !has_paths) {
    return InvalidArgument(m.preset == ModelPreset::kNone
                               ? "model: give a preset ('tiny', 'sd15'), model.pretrained, "
                                 "model.unet2d or model.unet_motion"
                               : "model.preset: " + Show(Name(m.preset)) +
                                     " cannot be combined with model.pretrained/model.unet2d/"
                                     "model.unet_motion; give one of them");
  }
  if (unet_sources > 1) {
    return InvalidArgument(
        "model: give one of model.pretrained, model.unet2d (+ motion_adapter) or "
        "model.unet_motion, not several");
  }
  // With a preset, a trained motion module of the preset's shape replaces its random one
  // (a LoRA benchmarked at the preset's size).
  if (!m.motion_adapter.empty() && m.unet2d.empty() && m.pretrained.empty() &&
      m.preset == ModelPreset::kNone) {
    return InvalidArgument("model.motion_adapter: " + Show(m.motion_adapter) +
                           " needs model.pretrained, model.unet2d or a preset (a unet_motion has "
                           "its own modules)");
  }
  ADCTL_RETURN_IF_ERROR(ValidateLora(m, preprocess));
  if (m.motion_max_frames > 0 && preprocess) {
    return InvalidArgument("model.motion_max_frames: a preprocess job runs no motion modules");
  }
  if (m.motion_max_frames > 0 && m.lora.enabled()) {
    return InvalidArgument(
        "model.motion_max_frames: not with model.lora (its adapters and merged exports would "
        "need the extended table too); extend the motion modules in a full training job first");
  }

  // data
  const DataSpec& d = s.data;
  if (preprocess != (d.kind == DataKind::kVideo)) {
    return InvalidArgument(
        preprocess ? "data.kind: a preprocess job reads videos: set data.kind 'video', got " +
                         Show(Name(d.kind))
                   : "data.kind: 'video' is read by a preprocess job (kind: preprocess); train "
                     "on its cache with data.kind 'latents' and data.path = preprocess.output");
  }
  if (d.kind == DataKind::kVideo) {
    if (d.csv.empty()) return InvalidArgument("data.csv: required for data.kind 'video'");
    if (d.video_dir.empty()) {
      return InvalidArgument("data.video_dir: required for data.kind 'video'");
    }
    if (d.id_column.empty()) return InvalidArgument("data.id_column: must not be empty");
    if (d.caption_column.empty()) return InvalidArgument("data.caption_column: must not be empty");
    if (d.file_pattern.find("{" + d.id_column + "}") == std::string::npos) {
      return InvalidArgument("data.file_pattern: must contain {" + d.id_column +
                             "} (the id column), got " + Show(d.file_pattern));
    }
    // The pattern's literal text: relative, no `..` component, no NUL (CSV values are checked
    // where the worker reads them: a row can name no file outside data.video_dir).
    if (d.file_pattern[0] == '/' || d.file_pattern.find('\0') != std::string::npos ||
        ("/" + d.file_pattern + "/").find("/../") != std::string::npos) {
      return InvalidArgument(
          "data.file_pattern: must be a path relative to data.video_dir without '..' or NUL, "
          "got " +
          Show(d.file_pattern));
    }
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("data.stride", d.stride, 1));
    for (auto [path, v] : {std::pair{"data.sample_height", d.sample_height},
                           std::pair{"data.sample_width", d.sample_width}}) {
      if (v < 8 || v % 8 != 0) {
        return InvalidArgument(std::string(path) + ": must be a multiple of 8 (>= 8), got " +
                               Show(v));
      }
    }
    const PreprocessSpec& p = s.preprocess;
    if (p.output.empty()) {
      return InvalidArgument("preprocess.output: required (the latent cache directory)");
    }
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("preprocess.shard_size", p.shard_size, 1));
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("preprocess.decode_threads", p.decode_threads, 1));
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("preprocess.vae_chunk", p.vae_chunk, 1));
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("preprocess.min_frames", p.min_frames, 1));
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("preprocess.max_clips", p.max_clips, 0));
    ADCTL_RETURN_IF_ERROR(
        Within<int64_t>("preprocess.windows_per_video", p.windows_per_video, 1, 64));
    ADCTL_RETURN_IF_ERROR(ValidateBuckets(p.buckets));
  } else if (!s.preprocess.output.empty()) {
    return InvalidArgument("preprocess.output: only used by kind 'preprocess', got " +
                           Show(s.preprocess.output));
  }
  if (!s.preprocess.buckets.empty() && s.kind != JobKind::kPreprocess) {
    return InvalidArgument("preprocess.buckets: only used by kind 'preprocess'");
  }
  if (!d.sources.empty()) {
    ADCTL_RETURN_IF_ERROR(ValidateSources(d));
  } else if (d.kind == DataKind::kLatents && d.path.empty()) {
    return InvalidArgument(
        "data.path: required for data.kind 'latents' (a directory of shards), or data.sources");
  }
  if (d.kind == DataKind::kSynthetic && !d.path.empty()) {
    return InvalidArgument("data.path: only used with data.kind 'latents', got " + Show(d.path) +
                           " with kind 'synthetic'");
  }
  // Sizes that could never fit are refused here, naming the field, rather than by a rank's
  // allocation failing (and being retried) later.
  if (m.preset == ModelPreset::kTiny) {
    const int64_t tiny_frames = std::max(kTinyMaxFrames, m.motion_max_frames);
    if (d.frames > tiny_frames) {
      return InvalidArgument("data.frames: the tiny preset takes at most " +
                             std::to_string(tiny_frames) + " frames, got " + Show(d.frames) +
                             " (model.motion_max_frames extends its positional table)");
    }
    // The tiny UNet downsamples once (two down blocks), so latent sides must be even.
    if (d.height % 2 != 0) {
      return InvalidArgument("data.height: must be even for the tiny preset, got " +
                             Show(d.height));
    }
    if (d.width % 2 != 0) {
      return InvalidArgument("data.width: must be even for the tiny preset, got " + Show(d.width));
    }
  }
  if (m.preset == ModelPreset::kSd15) {
    // SD1.5 downsamples three times: latent sides must be multiples of 8.
    if (d.height % 8 != 0 || d.width % 8 != 0) {
      return InvalidArgument("data.height/data.width: must be multiples of 8 for the sd15 preset");
    }
  }

  // train
  const TrainSpec& t = s.train;
  // One micro-batch's latents on a rank (4 channels); each factor is bounded above.
  const int64_t batch_latents = t.batch_size * d.frames * d.height * d.width * 4;
  if (batch_latents > kMaxBatchLatents) {
    return InvalidArgument(
        "train.batch_size x data.frames x data.height x data.width: one batch would hold " +
        std::to_string(batch_latents) + " latent values, at most " +
        std::to_string(kMaxBatchLatents) + " (lower the batch size or the clip size)");
  }
  ADCTL_RETURN_IF_ERROR(UnitInterval("train.beta1", t.beta1));
  ADCTL_RETURN_IF_ERROR(UnitInterval("train.beta2", t.beta2));
  ADCTL_RETURN_IF_ERROR(Finite("train.max_grad_norm", t.max_grad_norm));
  if (!(t.rollback_lr_factor > 0 && t.rollback_lr_factor <= 1)) {
    return InvalidArgument("train.rollback_lr_factor: must be in (0, 1], got " +
                           Show(t.rollback_lr_factor));
  }
  if (t.nan_policy == NanPolicy::kRollback && t.max_rollbacks > s.resources.max_restarts) {
    return InvalidArgument("train.max_rollbacks: " + Show(t.max_rollbacks) +
                           " is above resources.max_restarts (" + Show(s.resources.max_restarts) +
                           "): each rollback restarts the job");
  }
  ADCTL_RETURN_IF_ERROR(UnitInterval("train.caption_dropout", t.caption_dropout));
  if (t.beta_schedule == BetaSchedule::kPretrained && m.pretrained.empty()) {
    return InvalidArgument(
        "train.beta_schedule: 'pretrained' reads model.pretrained's scheduler/, which is not set");
  }
  if (t.beta_end >= 1) {
    return InvalidArgument("train.beta_end: must be < 1, got " + Show(t.beta_end));
  }
  if (t.beta_start > t.beta_end) {
    return InvalidArgument("train.beta_start: must be <= train.beta_end (" + Show(t.beta_end) +
                           "), got " + Show(t.beta_start));
  }
  const EmaSpec& ema = t.ema;
  ADCTL_RETURN_IF_ERROR(Finite("train.ema.decay", ema.decay));
  if (ema.decay < 0 || ema.decay >= 1) {
    return InvalidArgument(
        "train.ema.decay: must be in [0, 1) (0: no EMA; diffusers: 0.9999), got " +
        Show(ema.decay));
  }
  if (ema.enabled() && preprocess) {
    return InvalidArgument("train.ema: a preprocess job trains no weights to average");
  }
  // validation, eval and export may use the average instead of the weights.
  for (auto [path, weights] : {std::pair{"validation.weights", &s.validation.weights},
                               std::pair{"eval.weights", &s.eval.weights},
                               std::pair{"export.weights", &s.exports.weights}}) {
    if (*weights == WeightsSource::kEma && !ema.enabled()) {
      return InvalidArgument(std::string(path) +
                             ": ema needs train.ema (set train.ema.decay, e.g. 0.9999)");
    }
  }

  // checkpoint
  const KeepBestSpec& best = s.checkpoint.keep_best;
  if (best.k > 0 && !s.eval.enabled()) {
    return InvalidArgument(
        "checkpoint.keep_best: ranks checkpoints by eval_loss, which needs eval (set "
        "eval.holdout_clips or eval.path)");
  }
  if (best.k > 0 && !s.checkpoint.enabled) {
    return InvalidArgument("checkpoint.keep_best: checkpoint.enabled is false (nothing to keep)");
  }

  // validation
  const ValidationSpec& v = s.validation;
  if (!v.prompts.empty()) {
    if (preprocess) return InvalidArgument("validation: a preprocess job renders no samples");
    if (m.pretrained.empty()) {
      return InvalidArgument(
          "validation.prompts: rendering samples needs model.pretrained (its vae/, text_encoder/ "
          "and tokenizer/)");
    }
    for (size_t i = 0; i < v.prompts.size(); ++i) {
      if (v.prompts[i].empty()) {
        return InvalidArgument("validation.prompts[" + std::to_string(i) + "]: empty prompt");
      }
    }
    if (v.every_steps == 0 && v.at_steps.empty()) {
      return InvalidArgument(
          "validation: prompts are set but every_steps is 0 and at_steps is empty (never)");
    }
  }
  if (v.steps > t.num_train_timesteps) {
    return InvalidArgument("validation.steps: at most train.num_train_timesteps (" +
                           Show(t.num_train_timesteps) + "), got " + Show(v.steps));
  }
  ADCTL_RETURN_IF_ERROR(Finite("validation.guidance", v.guidance));
  for (auto [path, px] :
       {std::pair{"validation.height", v.height}, std::pair{"validation.width", v.width}}) {
    if (px < 8 || px % 8 != 0) {
      return InvalidArgument(std::string(path) + ": must be a multiple of 8 (>= 8), got " +
                             Show(px));
    }
    ADCTL_RETURN_IF_ERROR(Within<int64_t>(path, px, 8, 8 * kMaxLatentSide));
  }
  for (size_t i = 0; i < v.at_steps.size(); ++i) {
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>(
        ("validation.at_steps[" + std::to_string(i) + "]").c_str(), v.at_steps[i], 1));
  }

  // eval
  const EvalSpec& e = s.eval;
  if (e.enabled()) {
    if (preprocess) return InvalidArgument("eval: a preprocess job trains nothing to evaluate");
    if (e.holdout_clips > 0 && !e.path.empty()) {
      return InvalidArgument(
          "eval: set holdout_clips (clips of data held out) or path (a "
          "cache of eval clips), not both");
    }
    if (e.holdout_clips > 0 && s.data.kind == DataKind::kSynthetic &&
        e.holdout_clips >= s.data.num_samples) {
      return InvalidArgument("eval.holdout_clips: " + Show(e.holdout_clips) +
                             " leaves no clip of data.num_samples (" + Show(s.data.num_samples) +
                             ") to train on");
    }
    if (e.timesteps.empty()) return InvalidArgument("eval.timesteps: at least one timestep");
    for (size_t i = 0; i < e.timesteps.size(); ++i) {
      ADCTL_RETURN_IF_ERROR(Within<int64_t>(("eval.timesteps[" + std::to_string(i) + "]").c_str(),
                                            e.timesteps[i], 0, t.num_train_timesteps - 1));
    }
  }

  // export
  for (size_t i = 0; i < s.exports.formats.size(); ++i) {
    const std::string path = "export.formats[" + std::to_string(i) + "]";
    if (preprocess) return InvalidArgument(path + ": a preprocess job trains no motion modules");
    // A LoRA job exports its adapters (and the base with them merged); any other its modules.
    if (m.lora.enabled()) {
      ADCTL_RETURN_IF_ERROR(OneOf(path.c_str(), s.exports.formats[i],
                                  {"diffusers-lora", "animatediff-lora", "merged"}));
      if (s.exports.formats[i] == "animatediff-lora" && m.lora.scope != LoraScope::kMotion) {
        return InvalidArgument(path +
                               ": animatediff-lora holds motion-module adapters only, "
                               "and model.lora.scope is " +
                               Show(Name(m.lora.scope)) + " (export diffusers-lora)");
      }
    } else {
      ADCTL_RETURN_IF_ERROR(
          OneOf(path.c_str(), s.exports.formats[i], {"diffusers", "animatediff"}));
    }
  }

  // resources
  const ResourceSpec& r = s.resources;
  ADCTL_RETURN_IF_ERROR(CheckGraceSeconds("resources.grace_seconds", r.grace_seconds));
  const bool slurm_fields = r.nodes != 1 || r.gpus_per_node != 0 || !r.slurm_account.empty() ||
                            !r.slurm_partition.empty() || !r.slurm_qos.empty() ||
                            !r.slurm_time_limit.empty() || !r.slurm_extra_args.empty();
  if (r.launcher == LauncherKind::kLocal && slurm_fields) {
    return InvalidArgument(
        "resources: nodes, gpus_per_node and slurm_* apply to resources.launcher: slurm only");
  }
  if (r.gpus_per_node > 0 && r.gpus != r.nodes * r.gpus_per_node) {
    return InvalidArgument("resources.gpus: must be resources.nodes × resources.gpus_per_node = " +
                           std::to_string(r.nodes * r.gpus_per_node) + ", got " +
                           std::to_string(r.gpus));
  }
  if (r.gpus % r.nodes != 0) {
    return InvalidArgument("resources.gpus: " + std::to_string(r.gpus) +
                           " ranks do not split evenly over resources.nodes " +
                           std::to_string(r.nodes));
  }
  if (r.allow_shrink && !r.preemptible) {
    return InvalidArgument(
        "resources.allow_shrink: needs resources.preemptible: true (a job shrinks only when it "
        "resumes after being preempted)");
  }
  if (r.preemptible && r.launcher == LauncherKind::kSlurm) {
    return InvalidArgument(
        "resources.preemptible: applies to jobs on adctld's own devices (resources.launcher "
        "local); a Slurm job is preempted by its partition's rules");
  }
  constexpr size_t kMaxWebhooks = 8;
  if (s.notify.webhooks.size() > kMaxWebhooks) {
    return InvalidArgument("notify.webhooks: at most " + std::to_string(kMaxWebhooks) +
                           " URLs, got " + std::to_string(s.notify.webhooks.size()));
  }
  for (size_t i = 0; i < s.notify.webhooks.size(); ++i) {
    ADCTL_RETURN_IF_ERROR(
        CheckWebhookUrl("notify.webhooks[" + std::to_string(i) + "]", s.notify.webhooks[i]));
  }
  return Status::Ok();
}

Status CheckWebhookUrl(const std::string& field, const std::string& url) {
  constexpr size_t kMaxUrl = 2048;
  if (url.size() > kMaxUrl) {
    return InvalidArgument(field + ": at most " + std::to_string(kMaxUrl) + " characters, got " +
                           std::to_string(url.size()));
  }
  for (unsigned char c : url) {
    if (c <= ' ' || c == 0x7f) {
      return InvalidArgument(field + ": a URL has no spaces or control characters, got " +
                             Show(url.substr(0, 64)));
    }
  }
  size_t host = 0;
  if (url.rfind("http://", 0) == 0) host = 7;
  if (url.rfind("https://", 0) == 0) host = 8;
  if (host == 0) {
    return InvalidArgument(field + ": an http:// or https:// URL, got " + Show(url.substr(0, 64)));
  }
  if (host >= url.size() || url[host] == '/' || url[host] == ':' || url[host] == '?') {
    return InvalidArgument(field + ": names no host: " + Show(url.substr(0, 64)));
  }
  return Status::Ok();
}

}  // namespace adctl
