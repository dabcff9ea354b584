// Job spec: YAML ⇄ JobSpec (docs/job-spec.md is the user's reference); the YAML tree (its shape,
// unknown keys, overrides) is in job_spec_tree.cc, the validation in job_spec_validate.cc, the
// enums' names in job_spec_enums.cc.
//
// One list of fields (ForEachField) drives parsing, emission, equality, the set of known keys
// and the number fields' ranges, so a field added to the structs in job_spec.h needs exactly one
// line here, its range included (plus its row in docs/job-spec.md, and ValidateJobSpec only for
// what depends on other fields).
#include "common/job_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>
#include <variant>

#include "common/job_spec_internal.h"

namespace adctl {

namespace job_spec_internal {

// Shortest decimal form that reads back to the same double ("0.0001", "1e-08", "60").
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // integers without an exponent: 60, not 6e+01
    std::snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
std::optional<size_t> FirstInvalidUtf8(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = s[i];
    size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

}  // namespace job_spec_internal

using job_spec_internal::ApplyOverride;
using job_spec_internal::Bound;
using job_spec_internal::Describe;
using job_spec_internal::FirstInvalidUtf8;
using job_spec_internal::Flatten;
using job_spec_internal::FormatDouble;
using job_spec_internal::kBetas;
using job_spec_internal::kDay;
using job_spec_internal::kMaxFrames;
using job_spec_internal::kMaxLatentSide;
using job_spec_internal::kMaxPriority;
using job_spec_internal::kMaxSamples;
using job_spec_internal::kMaxSteps;
using job_spec_internal::kMaxTextLen;
using job_spec_internal::LoadYaml;

namespace {

// Calls f(dotted_path, field, bounds...) for every field in canonical order. `Spec` is JobSpec
// or const JobSpec. A number field's range (Bound, job_spec_internal.h) is on its line.
// train.beta1/beta2 are emitted together as "train.betas: [b1, b2]".
template <typename Spec, typename F>
void ForEachField(Spec& s, F&& f) {
  f("name", s.name);
  f("kind", s.kind);
  f("model.preset", s.model.preset);
  f("model.pretrained", s.model.pretrained);
  f("model.preset_layout", s.model.preset_layout);
  f("model.unet2d", s.model.unet2d);
  f("model.motion_adapter", s.model.motion_adapter);
  f("model.unet_motion", s.model.unet_motion);
  f("model.motion_module_file", s.model.motion_module_file);
  f("model.motion_norm", s.model.motion_norm);
  f("model.gradient_checkpointing", s.model.gradient_checkpointing);
  f("model.motion_max_frames", s.model.motion_max_frames, Bound::Within(0, kMaxFrames));
  f("model.lora.rank", s.model.lora.rank);
  f("model.lora.alpha", s.model.lora.alpha);
  f("model.lora.targets", s.model.lora.targets);
  f("model.lora.scope", s.model.lora.scope);
  f("model.lora.init_from", s.model.lora.init_from);
  f("model.lora.dropout", s.model.lora.dropout);
  f("data.kind", s.data.kind);
  f("data.path", s.data.path);
  f("data.sources", s.data.sources);
  f("data.num_samples", s.data.num_samples, Bound::Within(1, kMaxSamples));
  f("data.frames", s.data.frames, Bound::Within(1, kMaxFrames));
  f("data.height", s.data.height, Bound::Within(1, kMaxLatentSide));
  f("data.width", s.data.width, Bound::Within(1, kMaxLatentSide));
  f("data.text_len", s.data.text_len, Bound::Within(1, kMaxTextLen));
  f("data.seed", s.data.seed, Bound::AtLeast(0));
  f("data.csv", s.data.csv);
  f("data.video_dir", s.data.video_dir);
  f("data.id_column", s.data.id_column);
  f("data.caption_column", s.data.caption_column);
  f("data.file_pattern", s.data.file_pattern);
  f("data.stride", s.data.stride);
  f("data.sample_height", s.data.sample_height);
  f("data.sample_width", s.data.sample_width);
  f("preprocess.output", s.preprocess.output);
  f("preprocess.shard_size", s.preprocess.shard_size);
  f("preprocess.dtype", s.preprocess.dtype);
  f("preprocess.decode_threads", s.preprocess.decode_threads);
  f("preprocess.vae_chunk", s.preprocess.vae_chunk);
  f("preprocess.min_frames", s.preprocess.min_frames);
  f("preprocess.max_clips", s.preprocess.max_clips);
  f("preprocess.windows_per_video", s.preprocess.windows_per_video);
  f("preprocess.window_placement", s.preprocess.window_placement);
  f("preprocess.flip", s.preprocess.flip);
  f("preprocess.buckets", s.preprocess.buckets);
  f("train.max_steps", s.train.max_steps, Bound::Within(1, kMaxSteps));
  f("train.batch_size", s.train.batch_size, Bound::Within(1, 4096));
  f("train.grad_accum", s.train.grad_accum, Bound::Within(1, 65536));
  f("train.lr", s.train.lr, Bound::Positive(), Bound::Within(0, 1));
  f("train.beta1", s.train.beta1);
  f("train.beta2", s.train.beta2);
  f("train.weight_decay", s.train.weight_decay, Bound::NonNegative());
  f("train.eps", s.train.eps, Bound::Positive());
  f("train.lr_schedule", s.train.lr_schedule);
  f("train.warmup_steps", s.train.warmup_steps, Bound::Within(0, kMaxSteps));
  f("train.max_grad_norm", s.train.max_grad_norm);
  f("train.nan_policy", s.train.nan_policy);
  f("train.rollback_lr_factor", s.train.rollback_lr_factor);
  f("train.max_rollbacks", s.train.max_rollbacks, Bound::Within(0, 100));
  f("train.caption_dropout", s.train.caption_dropout);
  f("train.seed", s.train.seed, Bound::AtLeast(0));
  f("train.precision", s.train.precision);
  f("train.attention", s.train.attention);
  f("train.cuda_graphs", s.train.cuda_graphs);
  f("train.cudnn_benchmark", s.train.cudnn_benchmark);
  f("train.fused_kernels", s.train.fused_kernels);
  f("train.beta_schedule", s.train.beta_schedule);
  f("train.beta_start", s.train.beta_start, Bound::Positive());
  f("train.beta_end", s.train.beta_end, Bound::Positive());
  f("train.num_train_timesteps", s.train.num_train_timesteps, Bound::AtLeast(2));
  f("train.prediction_type", s.train.prediction_type);
  f("train.log_every", s.train.log_every, Bound::AtLeast(1));
  f("train.bucket_cap_mb", s.train.bucket_cap_mb, Bound::Positive());
  f("train.bucket_dtype", s.train.bucket_dtype);
  f("train.ema.decay", s.train.ema.decay);
  f("train.ema.start_step", s.train.ema.start_step, Bound::AtLeast(0));
  f("train.ema.update_every", s.train.ema.update_every, Bound::AtLeast(1));
  f("train.ema.device", s.train.ema.device);
  f("checkpoint.enabled", s.checkpoint.enabled);
  f("checkpoint.dir", s.checkpoint.dir);
  f("checkpoint.every_steps", s.checkpoint.every_steps, Bound::AtLeast(0));
  f("checkpoint.keep_last", s.checkpoint.keep_last, Bound::AtLeast(1));
  f("checkpoint.keep_every", s.checkpoint.keep_every, Bound::AtLeast(0));
  f("checkpoint.keep_at_validation", s.checkpoint.keep_at_validation);
  f("checkpoint.keep_best.metric", s.checkpoint.keep_best.metric);
  f("checkpoint.keep_best.k", s.checkpoint.keep_best.k, Bound::AtLeast(0));
  f("validation.prompts", s.validation.prompts);
  f("validation.negative_prompt", s.validation.negative_prompt);
  f("validation.steps", s.validation.steps, Bound::AtLeast(1));
  f("validation.guidance", s.validation.guidance);
  f("validation.seed", s.validation.seed, Bound::AtLeast(0));
  f("validation.frames", s.validation.frames, Bound::Within(1, kMaxFrames));
  f("validation.height", s.validation.height);
  f("validation.width", s.validation.width);
  f("validation.every_steps", s.validation.every_steps, Bound::AtLeast(0));
  f("validation.at_steps", s.validation.at_steps);
  f("validation.eta", s.validation.eta, Bound::NonNegative());
  f("validation.set_alpha_to_one", s.validation.set_alpha_to_one);
  f("validation.timestep_spacing", s.validation.timestep_spacing);
  f("validation.steps_offset", s.validation.steps_offset, Bound::AtLeast(0));
  f("validation.fps", s.validation.fps, Bound::AtLeast(1));
  f("validation.decode_chunk", s.validation.decode_chunk, Bound::AtLeast(1));
  f("validation.weights", s.validation.weights);
  f("eval.holdout_clips", s.eval.holdout_clips, Bound::AtLeast(0));
  f("eval.path", s.eval.path);
  f("eval.timesteps", s.eval.timesteps);
  f("eval.every_steps", s.eval.every_steps, Bound::AtLeast(0));
  f("eval.seed", s.eval.seed, Bound::AtLeast(0));
  f("eval.weights", s.eval.weights);
  f("export.formats", s.exports.formats);
  f("export.weights", s.exports.weights);
  f("resources.gpus", s.resources.gpus, Bound::Within(1, 4096));
  f("resources.priority", s.resources.priority, Bound::Within(-kMaxPriority, kMaxPriority));
  f("resources.max_restarts", s.resources.max_restarts, Bound::Within(0, 1000));
  f("resources.grace_seconds", s.resources.grace_seconds);
  f("resources.rendezvous_timeout_seconds", s.resources.rendezvous_timeout_seconds,
    Bound::Positive(), Bound::Within(0, kDay));
  f("resources.hang_timeout_seconds", s.resources.hang_timeout_seconds, Bound::NonNegative(),
    Bound::Within(0, 7 * kDay));
  f("resources.peak_tflops", s.resources.peak_tflops, Bound::NonNegative());
  f("resources.launcher", s.resources.launcher);
  f("resources.nodes", s.resources.nodes, Bound::Within(1, 4096));
  f("resources.gpus_per_node", s.resources.gpus_per_node, Bound::Within(0, 64));
  f("resources.slurm_account", s.resources.slurm_account);
  f("resources.slurm_partition", s.resources.slurm_partition);
  f("resources.slurm_qos", s.resources.slurm_qos);
  f("resources.slurm_time_limit", s.resources.slurm_time_limit);
  f("resources.slurm_extra_args", s.resources.slurm_extra_args);
  f("resources.preemptible", s.resources.preemptible);
  f("resources.allow_shrink", s.resources.allow_shrink);
  f("notify.webhooks", s.notify.webhooks);
}

}  // namespace

namespace job_spec_internal {

const std::set<std::string>& KnownPaths() {
  static const std::set<std::string> paths = [] {
    std::set<std::string> p{kBetas};
    JobSpec spec;
    ForEachField(spec, [&](const char* path, auto&, auto&&...) { p.insert(path); });
    return p;
  }();
  return paths;
}

Status CheckFieldBounds(const JobSpec& spec) {
  Status status;
  ForEachField(spec, [&](const char* path, const auto& value, const auto&... bounds) {
    if constexpr (sizeof...(bounds) > 0) {
      for (const Bound& bound : {bounds...}) {
        if (status.ok()) status = CheckBound(path, value, bound);
      }
    }
  });
  return status;
}

}  // namespace job_spec_internal

namespace {

// The launcher fields (ResourceSpec): written only when they differ from a default spec's; the
// model.lora and eval fields only when a LoRA or an eval loss is asked for.
bool IsUnsetLauncherField(const std::string& path, const JobSpec& spec) {
  if (path.rfind("model.lora.", 0) == 0) return !spec.model.lora.enabled();
  if (path == "eval.weights") return spec.eval.weights == WeightsSource::kRaw;
  if (path.rfind("eval.", 0) == 0) return !spec.eval.enabled();
  if (path.rfind("train.ema.", 0) == 0) return !spec.train.ema.enabled();
  if (path.rfind("checkpoint.keep_best.", 0) == 0) return spec.checkpoint.keep_best.k == 0;
  if (path == "validation.weights") return spec.validation.weights == WeightsSource::kRaw;
  if (path == "data.sources") return spec.data.sources.empty();
  if (path == "preprocess.buckets") return spec.preprocess.buckets.empty();
  if (path == "model.motion_max_frames") return spec.model.motion_max_frames == 0;
  if (path == "train.rollback_lr_factor" || path == "train.max_rollbacks") {
    return spec.train.nan_policy != NanPolicy::kRollback;
  }
  if (path == "export.weights") return spec.exports.weights == WeightsSource::kRaw;
  if (path == "notify.webhooks") return spec.notify.webhooks.empty();
  if (path == "resources.preemptible") return !spec.resources.preemptible;
  if (path == "resources.allow_shrink") return !spec.resources.allow_shrink;
  static const std::set<std::string> kLauncherFields = {
      "resources.launcher",         "resources.nodes",           "resources.gpus_per_node",
      "resources.slurm_account",    "resources.slurm_partition", "resources.slurm_qos",
      "resources.slurm_time_limit", "resources.slurm_extra_args"};
  if (!kLauncherFields.count(path)) return false;
  const ResourceSpec defaults;
  const ResourceSpec& r = spec.resources;
  if (path == "resources.launcher") return r.launcher == defaults.launcher;
  if (path == "resources.nodes") return r.nodes == defaults.nodes;
  if (path == "resources.gpus_per_node") return r.gpus_per_node == defaults.gpus_per_node;
  if (path == "resources.slurm_account") return r.slurm_account.empty();
  if (path == "resources.slurm_partition") return r.slurm_partition.empty();
  if (path == "resources.slurm_qos") return r.slurm_qos.empty();
  if (path == "resources.slurm_time_limit") return r.slurm_time_limit.empty();
  return r.slurm_extra_args.empty();
}

bool IsQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

// ---- Scalar conversion -----------------------------------------------------------------------

Status Convert(const std::string& path, const YAML::Node& node, std::string* out) {
  if (node.IsNull()) {
    *out = "";
    return Status::Ok();
  }
  if (!node.IsScalar()) return InvalidArgument(path + ": expected a string, got " + Describe(node));
  *out = node.Scalar();
  return Status::Ok();
}

Status Convert(const std::string& path, const YAML::Node& node, int64_t* out) {
  const std::string expected = path + ": expected an integer, got " + Describe(node);
  if (!node.IsScalar() || IsQuoted(node)) return InvalidArgument(expected);
  const std::string& text = node.Scalar();
  if (text.empty()) return InvalidArgument(expected);
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || text[0] == ' ') return InvalidArgument(expected);
  if (errno == ERANGE) return InvalidArgument(path + ": integer out of range: " + text);
  *out = v;
  return Status::Ok();
}

Status Convert(const std::string& path, const YAML::Node& node, double* out) {
  const std::string expected = path + ": expected a number, got " + Describe(node);
  if (!node.IsScalar() || IsQuoted(node)) return InvalidArgument(expected);
  const std::string& text = node.Scalar();
  if (text.empty() || text[0] == ' ') return InvalidArgument(expected);
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (*end != '\0') return InvalidArgument(expected);
  *out = v;
  return Status::Ok();
}

Status Convert(const std::string& path, const YAML::Node& node, bool* out) {
  const std::string expected = path + ": expected a boolean (true/false), got " + Describe(node);
  if (!node.IsScalar() || IsQuoted(node)) return InvalidArgument(expected);
  std::string t = node.Scalar();
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "true" || t == "yes" || t == "on") {
    *out = true;
  } else if (t == "false" || t == "no" || t == "off") {
    *out = false;
  } else {
    return InvalidArgument(expected);
  }
  return Status::Ok();
}

// A mapping whose keys are strings, each once; `field(key, value)` converts one (or refuses an
// unknown key).
template <typename F>
Status ConvertMapping(const std::string& path, const YAML::Node& node, const char* fields,
                      F&& field) {
  if (!node.IsMap()) {
    return InvalidArgument(path + ": expected a mapping " + fields + ", got " + Describe(node));
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) return InvalidArgument(path + ": keys must be strings");
    const std::string key = entry.first.Scalar();
    if (!seen.insert(key).second)
      return InvalidArgument("duplicate field '" + path + "." + key + "'");
    ADCTL_RETURN_IF_ERROR(field(key, entry.second));
  }
  return Status::Ok();
}

// One of data.sources: a mapping {path, weight | repeats}.
Status Convert(const std::string& path, const YAML::Node& node, DataSource* out) {
  return ConvertMapping(path, node, "{path, weight | repeats}",
                        [&](const std::string& key, const YAML::Node& value) -> Status {
                          if (key == "path") return Convert(path + ".path", value, &out->path);
                          if (key == "weight")
                            return Convert(path + ".weight", value, &out->weight);
                          if (key == "repeats")
                            return Convert(path + ".repeats", value, &out->repeats);
                          return InvalidArgument("unknown field '" + path + "." + key +
                                                 "' (a source has path, weight, repeats)");
                        });
}

// One of preprocess.buckets: a mapping {width, height, frames}, all three given.
Status Convert(const std::string& path, const YAML::Node& node, PreprocessBucket* out) {
  std::set<std::string> given;
  ADCTL_RETURN_IF_ERROR(
      ConvertMapping(path, node, "{width, height, frames}",
                     [&](const std::string& key, const YAML::Node& value) -> Status {
                       int64_t* field = key == "width"    ? &out->width
                                        : key == "height" ? &out->height
                                        : key == "frames" ? &out->frames
                                                          : nullptr;
                       if (field == nullptr) {
                         return InvalidArgument("unknown field '" + path + "." + key +
                                                "' (a bucket has width, height, frames)");
                       }
                       given.insert(key);
                       return Convert(path + "." + key, value, field);
                     }));
  for (const char* key : {"width", "height", "frames"}) {
    if (!given.count(key)) return InvalidArgument(path + "." + key + ": required");
  }
  return Status::Ok();
}

// Lists: a YAML sequence of scalars (null or [] is empty).
template <typename T>
Status Convert(const std::string& path, const YAML::Node& node, std::vector<T>* out) {
  out->clear();
  if (node.IsNull()) return Status::Ok();
  if (!node.IsSequence()) return InvalidArgument(path + ": expected a list, got " + Describe(node));
  for (size_t i = 0; i < node.size(); ++i) {
    T v{};
    ADCTL_RETURN_IF_ERROR(Convert(path + "[" + std::to_string(i) + "]", node[i], &v));
    out->push_back(std::move(v));
  }
  return Status::Ok();
}

// A spec enum: one of its table's names.
template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
Status Convert(const std::string& path, const YAML::Node& node, E* out) {
  std::string text;
  ADCTL_RETURN_IF_ERROR(Convert(path, node, &text));
  std::string list;
  for (const SpecEnumName<E>& e : SpecEnumNames(E{})) {
    if (text == e.name) {
      *out = e.value;
      return Status::Ok();
    }
    if (*e.name == '\0') continue;  // "" (unset) is the default, not a choice to list
    list += std::string(list.empty() ? "" : ", ") + "'" + e.name + "'";
  }
  return InvalidArgument(path + ": must be one of " + list + ", got '" + text + "'");
}

Status ConvertBetas(const YAML::Node& node, double* beta1, double* beta2) {
  if (!node.IsSequence() || node.size() != 2) {
    return InvalidArgument(
        std::string(kBetas) + ": expected a list of two numbers [beta1, beta2], got " +
        (node.IsSequence() ? std::to_string(node.size()) + " elements" : Describe(node)));
  }
  ADCTL_RETURN_IF_ERROR(Convert(std::string(kBetas) + "[0]", node[0], beta1));
  return Convert(std::string(kBetas) + "[1]", node[1], beta2);
}

Result<JobSpec> FromTree(const YAML::Node& root) {
  std::map<std::string, YAML::Node> flat;
  ADCTL_RETURN_IF_ERROR(Flatten(root, &flat));
  JobSpec spec;
  Status status;
  ForEachField(spec, [&](const char* path, auto& field, auto&&...) {
    if (!status.ok()) return;
    auto it = flat.find(path);
    if (it != flat.end()) status = Convert(path, it->second, &field);
  });
  ADCTL_RETURN_IF_ERROR(status);
  auto betas = flat.find(kBetas);
  if (betas != flat.end()) {
    ADCTL_RETURN_IF_ERROR(ConvertBetas(betas->second, &spec.train.beta1, &spec.train.beta2));
  }
  return spec;
}

// ---- Emission --------------------------------------------------------------------------------

// A YAML double-quoted scalar: always quoted so "", "null", "1" and "yes" stay strings.
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string EmitValue(const std::string& v) { return Quote(v); }
std::string EmitValue(int64_t v) { return std::to_string(v); }
std::string EmitValue(double v) { return FormatDouble(v); }
std::string EmitValue(bool v) { return v ? "true" : "false"; }
std::string EmitValue(const DataSource& v) {
  std::string out = "{path: " + Quote(v.path);
  if (v.weight != 0) out += ", weight: " + FormatDouble(v.weight);
  if (v.repeats != 0) out += ", repeats: " + std::to_string(v.repeats);
  return out + "}";
}
std::string EmitValue(const PreprocessBucket& v) {
  return "{width: " + std::to_string(v.width) + ", height: " + std::to_string(v.height) +
         ", frames: " + std::to_string(v.frames) + "}";
}
template <typename T>
std::string EmitValue(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + EmitValue(v[i]);
  return out + "]";
}

template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
std::string EmitValue(E v) {
  return Quote(Name(v));
}

}  // namespace

Result<JobSpec> ParseJobSpec(const std::string& yaml_text,
                             const std::vector<std::string>& overrides) {
  if (yaml_text.size() > kMaxSpecBytes) {
    return InvalidArgument("spec: " + std::to_string(yaml_text.size()) + " bytes, more than the " +
                           std::to_string(kMaxSpecBytes) + " a job spec may have");
  }
  if (auto bad = FirstInvalidUtf8(yaml_text)) {
    return InvalidArgument("spec: not valid UTF-8 at byte " + std::to_string(*bad));
  }
  for (const std::string& o : overrides) {
    if (auto bad = FirstInvalidUtf8(o)) {
      return InvalidArgument("--set: not valid UTF-8 at byte " + std::to_string(*bad) + " of '" +
                             o.substr(0, *bad) + "'");
    }
  }
  Result<YAML::Node> loaded = LoadYaml(yaml_text, "spec");
  if (!loaded.ok()) return loaded.status();
  YAML::Node root = loaded.value();
  if (root.IsNull() || !root.IsDefined()) {
    root = YAML::Node(YAML::NodeType::Map);
  } else if (!root.IsMap()) {
    return InvalidArgument("spec: expected a mapping at the top level, got " + Describe(root));
  }
  for (const std::string& o : overrides) ADCTL_RETURN_IF_ERROR(ApplyOverride(root, o));
  Result<JobSpec> spec = FromTree(root);
  if (!spec.ok()) return spec;
  ADCTL_RETURN_IF_ERROR(ValidateJobSpec(spec.value()));
  return spec;
}

Result<JobSpec> LoadJobSpecFile(const std::string& path,
                                const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("job spec file not found or unreadable: " + path);
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return NotFound("cannot read job spec file: " + path);
  Result<JobSpec> spec = ParseJobSpec(text.str(), overrides);
  if (!spec.ok()) return Status(spec.status().code(), path + ": " + spec.status().message());
  return spec;
}

void ClearLauncherFields(ResourceSpec* resources) {
  const ResourceSpec defaults;
  resources->launcher = defaults.launcher;
  resources->nodes = defaults.nodes;
  resources->gpus_per_node = defaults.gpus_per_node;
  resources->slurm_account.clear();
  resources->slurm_partition.clear();
  resources->slurm_qos.clear();
  resources->slurm_time_limit.clear();
  resources->slurm_extra_args.clear();
}

void ClearCoordinatorFields(JobSpec* spec) {
  ClearLauncherFields(&spec->resources);
  spec->resources.preemptible = false;
  spec->resources.allow_shrink = false;
  spec->notify.webhooks.clear();
}

Result<JobSpec> WithRankCount(const JobSpec& spec, int64_t ranks, const std::string& field) {
  const int64_t global_batch = spec.GlobalBatch();
  const int64_t per_step = spec.train.batch_size * ranks;
  if (ranks < 1 || global_batch % per_step != 0) {
    return InvalidArgument(
        field + ": cannot keep the global batch of " + std::to_string(global_batch) +
        " clips (train.batch_size " + std::to_string(spec.train.batch_size) +
        " x train.grad_accum " + std::to_string(spec.train.grad_accum) + " x " +
        std::to_string(spec.resources.gpus) + " ranks) on " + std::to_string(ranks) +
        " ranks: " + std::to_string(global_batch) +
        " is not a multiple of batch_size x ranks = " + std::to_string(per_step));
  }
  JobSpec out = spec;
  out.train.grad_accum = global_batch / per_step;
  out.resources.gpus = ranks;
  ADCTL_RETURN_IF_ERROR(ValidateJobSpec(out));
  return out;
}

std::string JobSpecToYaml(const JobSpec& spec) {
  std::string out = "# adctl job spec (canonical form; every field is in docs/job-spec.md)\n";
  std::string current_section, current_subsection;
  ForEachField(spec, [&](const char* path_c, const auto& value, auto&&...) {
    const std::string path = path_c;
    if (path == "train.beta2") return;  // emitted with beta1 as "betas"
    if (IsUnsetLauncherField(path, spec)) return;
    size_t dot = path.find('.');
    if (dot == std::string::npos) {
      out += path + ": " + EmitValue(value) + "\n";
      return;
    }
    const std::string section = path.substr(0, dot);
    if (section != current_section) {
      out += section + ":\n";
      current_section = section;
    }
    if (path == "train.beta1") {
      out += "  betas: [" + FormatDouble(spec.train.beta1) + ", " + FormatDouble(spec.train.beta2) +
             "]\n";
      return;
    }
    if (const size_t sub_dot = path.find('.', dot + 1); sub_dot != std::string::npos) {
      const std::string subsection = path.substr(0, sub_dot);
      if (subsection != current_subsection) {
        out += "  " + subsection.substr(dot + 1) + ":\n";
        current_subsection = subsection;
      }
      out += "    " + path.substr(sub_dot + 1) + ": " + EmitValue(value) + "\n";
      return;
    }
    out += "  " + path.substr(dot + 1) + ": " + EmitValue(value) + "\n";
  });
  return out;
}

bool operator==(const JobSpec& a, const JobSpec& b) {
  using Value =
      std::variant<std::string, int64_t, double, bool, std::vector<std::string>,
                   std::vector<int64_t>, std::vector<DataSource>, std::vector<PreprocessBucket>>;
  auto collect = [](const JobSpec& s) {
    std::vector<Value> values;
    ForEachField(s, [&](const char*, const auto& v, auto&&...) {
      if constexpr (std::is_enum_v<std::decay_t<decltype(v)>>) {
        values.emplace_back(Name(v));
      } else {
        values.emplace_back(v);
      }
    });
    return values;
  };
  return collect(a) == collect(b);
}

std::vector<std::string> JobSpecFieldPaths() {
  std::vector<std::string> paths;
  JobSpec spec;
  ForEachField(spec, [&](const char* path, auto&, auto&&...) {
    if (std::string(path) == "train.beta2") return;
    paths.push_back(std::string(path) == "train.beta1" ? kBetas : path);
  });
  return paths;
}

std::string LoraBaseMotionModule(const ModelSpec& m) {
  return !m.motion_module_file.empty() ? m.motion_module_file
         : !m.motion_adapter.empty()   ? m.motion_adapter
                                       : m.unet_motion;
}

std::string TrainsSummary(const JobSpec& spec) {
  if (spec.kind == JobKind::kPreprocess) return "preprocessing";
  const ModelSpec& m = spec.model;
  if (!m.lora.enabled()) return "motion modules";
  std::string targets;
  for (const auto& t : m.lora.targets.empty()
                           ? std::vector<std::string>{"to_q", "to_k", "to_v", "to_out.0"}
                           : m.lora.targets) {
    targets += (targets.empty() ? "" : ", ") + t;
  }
  char alpha[32];
  std::snprintf(alpha, sizeof(alpha), "%g",
                m.lora.alpha > 0 ? m.lora.alpha : static_cast<double>(m.lora.rank));
  return "MotionLoRA rank " + std::to_string(m.lora.rank) + ", alpha " + alpha + " (" + targets +
         "; scope " + Name(m.lora.scope) + ") on " + LoraBaseMotionModule(m) +
         (m.lora.init_from.empty() ? "" : ", from " + m.lora.init_from);
}

bool ValidationDue(const ValidationSpec& spec, int64_t step) {
  if (spec.prompts.empty()) return false;
  if (spec.every_steps > 0 && step % spec.every_steps == 0) return true;
  return std::find(spec.at_steps.begin(), spec.at_steps.end(), step) != spec.at_steps.end();
}

int64_t ValidationsBetween(const ValidationSpec& spec, int64_t after, int64_t upto) {
  if (spec.prompts.empty() || upto <= after) return 0;
  int64_t n = spec.every_steps > 0 ? upto / spec.every_steps - after / spec.every_steps : 0;
  std::set<int64_t> extra;  // at_steps not already counted, each once
  for (int64_t step : spec.at_steps) {
    if (step > after && step <= upto && (spec.every_steps <= 0 || step % spec.every_steps != 0)) {
      extra.insert(step);
    }
  }
  return n + static_cast<int64_t>(extra.size());
}

}  // namespace adctl
