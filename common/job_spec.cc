// Job spec: YAML ⇄ JobSpec, overrides and validation (docs/job-spec.md is the user's reference).
//
// One list of fields (ForEachField) drives parsing, emission, equality and the set of known
// keys, so a field added to the structs in job_spec.h needs exactly one line here (plus its
// checks in ValidateJobSpec and its row in docs/job-spec.md).
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

namespace adctl {

// ---- The enums' name tables ------------------------------------------------------------------

#define ADCTL_SPEC_ENUM_TABLE(Enum, ...)                                \
  const std::vector<SpecEnumName<Enum>>& SpecEnumNames(Enum) {          \
    static const std::vector<SpecEnumName<Enum>> table = {__VA_ARGS__}; \
    return table;                                                       \
  }

ADCTL_SPEC_ENUM_TABLE(JobKind, {JobKind::kTrain, "train"}, {JobKind::kPreprocess, "preprocess"})
ADCTL_SPEC_ENUM_TABLE(ModelPreset, {ModelPreset::kNone, ""}, {ModelPreset::kTiny, "tiny"},
                      {ModelPreset::kSd15, "sd15"})
ADCTL_SPEC_ENUM_TABLE(PresetLayout, {PresetLayout::kV1, "v1"}, {PresetLayout::kV2, "v2"},
                      {PresetLayout::kV3, "v3"})
ADCTL_SPEC_ENUM_TABLE(MotionNorm, {MotionNorm::kAuto, "auto"},
                      {MotionNorm::kAcrossFrames, "across_frames"},
                      {MotionNorm::kPerFrame, "per_frame"})
ADCTL_SPEC_ENUM_TABLE(DataKind, {DataKind::kSynthetic, "synthetic"},
                      {DataKind::kLatents, "latents"}, {DataKind::kVideo, "video"})
ADCTL_SPEC_ENUM_TABLE(CacheDtype, {CacheDtype::kBf16, "bf16"}, {CacheDtype::kFp16, "fp16"})
ADCTL_SPEC_ENUM_TABLE(LrSchedule, {LrSchedule::kConstant, "constant"},
                      {LrSchedule::kCosine, "cosine"})
ADCTL_SPEC_ENUM_TABLE(Precision, {Precision::kAuto, "auto"}, {Precision::kFp32, "fp32"},
                      {Precision::kBf16, "bf16"})
ADCTL_SPEC_ENUM_TABLE(AttentionKernel, {AttentionKernel::kAuto, "auto"},
                      {AttentionKernel::kFlash, "flash"},
                      {AttentionKernel::kEfficient, "efficient"},
                      {AttentionKernel::kCudnn, "cudnn"}, {AttentionKernel::kMath, "math"})
ADCTL_SPEC_ENUM_TABLE(BetaSchedule, {BetaSchedule::kLinear, "linear"},
                      {BetaSchedule::kScaledLinear, "scaled_linear"},
                      {BetaSchedule::kPretrained, "pretrained"})
ADCTL_SPEC_ENUM_TABLE(PredictionType, {PredictionType::kEpsilon, "epsilon"},
                      {PredictionType::kVPrediction, "v_prediction"})
ADCTL_SPEC_ENUM_TABLE(BucketDtype, {BucketDtype::kFp32, "fp32"}, {BucketDtype::kBf16, "bf16"})
// "false" / "true": the boolean this field was before it named a granularity.
ADCTL_SPEC_ENUM_TABLE(GradientCheckpointing, {GradientCheckpointing::kNone, "none"},
                      {GradientCheckpointing::kResnets, "resnets"},
                      {GradientCheckpointing::kFull, "full"},
                      {GradientCheckpointing::kNone, "false"},
                      {GradientCheckpointing::kFull, "true"})
ADCTL_SPEC_ENUM_TABLE(LoraScope, {LoraScope::kMotion, "motion"}, {LoraScope::kSpatial, "spatial"},
                      {LoraScope::kBoth, "both"})

#undef ADCTL_SPEC_ENUM_TABLE

namespace {

constexpr const char* kSections[] = {"model",      "data", "preprocess", "train",     "checkpoint",
                                     "validation", "eval", "export",     "resources", "notify"};
// Mappings one level further down: `model: {lora: {rank: 64}}` is model.lora.rank.
constexpr const char* kSubsections[] = {"model.lora", "train.ema", "checkpoint.keep_best"};

bool IsSubsection(const std::string& path) {
  for (const char* s : kSubsections) {
    if (path == s) return true;
  }
  return false;
}

// Calls f(dotted_path, field) for every field in canonical order. `Spec` is JobSpec or
// const JobSpec. train.beta1/beta2 are emitted together as "train.betas: [b1, b2]".
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
  f("model.lora.rank", s.model.lora.rank);
  f("model.lora.alpha", s.model.lora.alpha);
  f("model.lora.targets", s.model.lora.targets);
  f("model.lora.scope", s.model.lora.scope);
  f("model.lora.init_from", s.model.lora.init_from);
  f("model.lora.dropout", s.model.lora.dropout);
  f("data.kind", s.data.kind);
  f("data.path", s.data.path);
  f("data.sources", s.data.sources);
  f("data.num_samples", s.data.num_samples);
  f("data.frames", s.data.frames);
  f("data.height", s.data.height);
  f("data.width", s.data.width);
  f("data.text_len", s.data.text_len);
  f("data.seed", s.data.seed);
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
  f("train.max_steps", s.train.max_steps);
  f("train.batch_size", s.train.batch_size);
  f("train.grad_accum", s.train.grad_accum);
  f("train.lr", s.train.lr);
  f("train.beta1", s.train.beta1);
  f("train.beta2", s.train.beta2);
  f("train.weight_decay", s.train.weight_decay);
  f("train.eps", s.train.eps);
  f("train.lr_schedule", s.train.lr_schedule);
  f("train.warmup_steps", s.train.warmup_steps);
  f("train.max_grad_norm", s.train.max_grad_norm);
  f("train.nan_policy", s.train.nan_policy);
  f("train.rollback_lr_factor", s.train.rollback_lr_factor);
  f("train.max_rollbacks", s.train.max_rollbacks);
  f("train.caption_dropout", s.train.caption_dropout);
  f("train.seed", s.train.seed);
  f("train.precision", s.train.precision);
  f("train.attention", s.train.attention);
  f("train.cuda_graphs", s.train.cuda_graphs);
  f("train.cudnn_benchmark", s.train.cudnn_benchmark);
  f("train.fused_kernels", s.train.fused_kernels);
  f("train.beta_schedule", s.train.beta_schedule);
  f("train.beta_start", s.train.beta_start);
  f("train.beta_end", s.train.beta_end);
  f("train.num_train_timesteps", s.train.num_train_timesteps);
  f("train.prediction_type", s.train.prediction_type);
  f("train.log_every", s.train.log_every);
  f("train.bucket_cap_mb", s.train.bucket_cap_mb);
  f("train.bucket_dtype", s.train.bucket_dtype);
  f("train.ema.decay", s.train.ema.decay);
  f("train.ema.start_step", s.train.ema.start_step);
  f("train.ema.update_every", s.train.ema.update_every);
  f("train.ema.device", s.train.ema.device);
  f("checkpoint.enabled", s.checkpoint.enabled);
  f("checkpoint.dir", s.checkpoint.dir);
  f("checkpoint.every_steps", s.checkpoint.every_steps);
  f("checkpoint.keep_last", s.checkpoint.keep_last);
  f("checkpoint.keep_every", s.checkpoint.keep_every);
  f("checkpoint.keep_at_validation", s.checkpoint.keep_at_validation);
  f("checkpoint.keep_best.metric", s.checkpoint.keep_best.metric);
  f("checkpoint.keep_best.k", s.checkpoint.keep_best.k);
  f("validation.prompts", s.validation.prompts);
  f("validation.negative_prompt", s.validation.negative_prompt);
  f("validation.steps", s.validation.steps);
  f("validation.guidance", s.validation.guidance);
  f("validation.seed", s.validation.seed);
  f("validation.frames", s.validation.frames);
  f("validation.height", s.validation.height);
  f("validation.width", s.validation.width);
  f("validation.every_steps", s.validation.every_steps);
  f("validation.at_steps", s.validation.at_steps);
  f("validation.eta", s.validation.eta);
  f("validation.set_alpha_to_one", s.validation.set_alpha_to_one);
  f("validation.timestep_spacing", s.validation.timestep_spacing);
  f("validation.steps_offset", s.validation.steps_offset);
  f("validation.fps", s.validation.fps);
  f("validation.decode_chunk", s.validation.decode_chunk);
  f("validation.weights", s.validation.weights);
  f("eval.holdout_clips", s.eval.holdout_clips);
  f("eval.path", s.eval.path);
  f("eval.timesteps", s.eval.timesteps);
  f("eval.every_steps", s.eval.every_steps);
  f("eval.seed", s.eval.seed);
  f("eval.weights", s.eval.weights);
  f("export.formats", s.exports.formats);
  f("export.weights", s.exports.weights);
  f("resources.gpus", s.resources.gpus);
  f("resources.priority", s.resources.priority);
  f("resources.max_restarts", s.resources.max_restarts);
  f("resources.grace_seconds", s.resources.grace_seconds);
  f("resources.rendezvous_timeout_seconds", s.resources.rendezvous_timeout_seconds);
  f("resources.hang_timeout_seconds", s.resources.hang_timeout_seconds);
  f("resources.peak_tflops", s.resources.peak_tflops);
  f("resources.launcher", s.resources.launcher);
  f("resources.nodes", s.resources.nodes);
  f("resources.gpus_per_node", s.resources.gpus_per_node);
  f("resources.slurm_account", s.resources.slurm_account);
  f("resources.slurm_partition", s.resources.slurm_partition);
  f("resources.slurm_qos", s.resources.slurm_qos);
  f("resources.slurm_time_limit", s.resources.slurm_time_limit);
  f("resources.slurm_extra_args", s.resources.slurm_extra_args);
  f("resources.preemptible", s.resources.preemptible);
  f("resources.allow_shrink", s.resources.allow_shrink);
  f("notify.webhooks", s.notify.webhooks);
}

// The launcher fields (ResourceSpec): written only when they differ from a default spec's; the
// model.lora and eval fields only when a LoRA or an eval loss is asked for.
bool IsUnsetLauncherField(const std::string& path, const JobSpec& spec) {
  if (path.rfind("model.lora.", 0) == 0) return !spec.model.lora.enabled();
  if (path == "eval.weights") return spec.eval.weights == "raw";
  if (path.rfind("eval.", 0) == 0) return !spec.eval.enabled();
  if (path.rfind("train.ema.", 0) == 0) return !spec.train.ema.enabled();
  if (path.rfind("checkpoint.keep_best.", 0) == 0) return spec.checkpoint.keep_best.k == 0;
  if (path == "validation.weights") return spec.validation.weights == "raw";
  if (path == "data.sources") return spec.data.sources.empty();
  if (path == "train.rollback_lr_factor" || path == "train.max_rollbacks") {
    return spec.train.nan_policy != "rollback";
  }
  if (path == "export.weights") return spec.exports.weights == "raw";
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

constexpr const char* kBetas = "train.betas";

// Every dotted path the parser accepts: the struct fields plus the "train.betas" pair.
const std::set<std::string>& KnownPaths() {
  static const std::set<std::string> paths = [] {
    std::set<std::string> p{kBetas};
    JobSpec spec;
    ForEachField(spec, [&](const char* path, auto&) { p.insert(path); });
    return p;
  }();
  return paths;
}

bool IsSection(const std::string& key) {
  for (const char* s : kSections) {
    if (key == s) return true;
  }
  return false;
}

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

std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

bool IsQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

Status UnknownField(const std::string& path) {
  std::string best;
  size_t best_distance = 3;  // suggest only near misses (typos), not unrelated names
  for (const std::string& known : KnownPaths()) {
    size_t d = EditDistance(path, known);
    if (d < best_distance) best_distance = d, best = known;
  }
  std::string message = "unknown field '" + path + "'";
  if (!best.empty()) message += " (did you mean '" + best + "'?)";
  return InvalidArgument(message);
}

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

// One of data.sources: a mapping {path, weight | repeats}.
Status Convert(const std::string& path, const YAML::Node& node, DataSource* out) {
  if (!node.IsMap()) {
    return InvalidArgument(path + ": expected a mapping {path, weight | repeats}, got " +
                           Describe(node));
  }
  std::set<std::string> seen;
  for (const auto& field : node) {
    if (!field.first.IsScalar()) return InvalidArgument(path + ": keys must be strings");
    const std::string key = field.first.Scalar();
    if (!seen.insert(key).second)
      return InvalidArgument("duplicate field '" + path + "." + key + "'");
    if (key == "path") {
      ADCTL_RETURN_IF_ERROR(Convert(path + ".path", field.second, &out->path));
    } else if (key == "weight") {
      ADCTL_RETURN_IF_ERROR(Convert(path + ".weight", field.second, &out->weight));
    } else if (key == "repeats") {
      ADCTL_RETURN_IF_ERROR(Convert(path + ".repeats", field.second, &out->repeats));
    } else {
      return InvalidArgument("unknown field '" + path + "." + key +
                             "' (a source has path, weight, repeats)");
    }
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

// ---- Tree handling ---------------------------------------------------------------------------

Result<YAML::Node> LoadYaml(const std::string& text, const std::string& what) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(what + ": YAML error at line " + std::to_string(e.mark.line + 1) +
                           ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Applies one "a.b=value" override to the YAML tree (root is a mapping).
Status ApplyOverride(YAML::Node& root, const std::string& override_text) {
  const std::string where = "override '" + override_text + "'";
  size_t eq = override_text.find('=');
  if (eq == std::string::npos) return InvalidArgument(where + ": expected key=value");
  const std::string path = Trim(override_text.substr(0, eq));
  const std::string value_text = Trim(override_text.substr(eq + 1));
  if (IsSection(path) || IsSubsection(path)) {
    return InvalidArgument(where + ": '" + path + "' is a section; set one field, e.g. '" + path +
                           ".<field>=value'");
  }
  if (KnownPaths().count(path) == 0) {
    Status unknown = UnknownField(path);
    return InvalidArgument(where + ": " + unknown.message());
  }
  YAML::Node value;
  if (value_text.empty()) {
    value = YAML::Node(std::string());
  } else {
    Result<YAML::Node> parsed = LoadYaml(value_text, where);
    if (!parsed.ok()) return parsed.status();
    value = parsed.value();
  }

  size_t dot = path.find('.');
  if (dot == std::string::npos) {
    root[path] = value;
    return Status::Ok();
  }
  const std::string section = path.substr(0, dot);
  const std::string key = path.substr(dot + 1);
  YAML::Node section_node = root[section];
  if (!section_node.IsDefined() || section_node.IsNull()) {
    root[section] = YAML::Node(YAML::NodeType::Map);
    section_node.reset(root[section]);
  } else if (!section_node.IsMap()) {
    return InvalidArgument(where + ": '" + section + "' is " + Describe(section_node) +
                           ", not a mapping");
  }
  // Keep the beta pair in one form: an override of one beta edits a "betas" list in place.
  if (key == "betas") {
    section_node.remove("beta1");
    section_node.remove("beta2");
  } else if ((key == "beta1" || key == "beta2") && section_node["betas"].IsSequence() &&
             section_node["betas"].size() == 2) {
    section_node["betas"][key == "beta1" ? 0 : 1] = value;
    return Status::Ok();
  }
  if (const size_t sub_dot = key.find('.'); sub_dot != std::string::npos) {  // model.lora.rank
    const std::string sub = key.substr(0, sub_dot);
    YAML::Node sub_node = section_node[sub];
    if (!sub_node.IsDefined() || sub_node.IsNull()) {
      section_node[sub] = YAML::Node(YAML::NodeType::Map);
      sub_node.reset(section_node[sub]);
    } else if (!sub_node.IsMap()) {
      return InvalidArgument(where + ": '" + section + "." + sub + "' is " + Describe(sub_node) +
                             ", not a mapping");
    }
    sub_node[key.substr(sub_dot + 1)] = value;
    return Status::Ok();
  }
  section_node[key] = value;
  return Status::Ok();
}

// Checks the tree's shape (mappings, known keys, no duplicates) and flattens it to
// dotted path → node.
Status Flatten(const YAML::Node& root, std::map<std::string, YAML::Node>* flat) {
  auto add = [&](const std::string& path, const YAML::Node& node) -> Status {
    if (KnownPaths().count(path) == 0) return UnknownField(path);
    if (!flat->emplace(path, node).second) return InvalidArgument("duplicate field '" + path + "'");
    return Status::Ok();
  };
  for (const auto& entry : root) {
    if (!entry.first.IsScalar()) return InvalidArgument("spec: keys must be strings");
    const std::string key = entry.first.Scalar();
    if (!IsSection(key)) {
      ADCTL_RETURN_IF_ERROR(add(key, entry.second));
      continue;
    }
    const YAML::Node& section = entry.second;
    if (section.IsNull()) continue;  // "train:" with nothing under it
    if (!section.IsMap()) {
      return InvalidArgument(key + ": expected a mapping, got " + Describe(section));
    }
    for (const auto& field : section) {
      if (!field.first.IsScalar()) return InvalidArgument(key + ": keys must be strings");
      const std::string path = key + "." + field.first.Scalar();
      if (!IsSubsection(path)) {
        ADCTL_RETURN_IF_ERROR(add(path, field.second));
        continue;
      }
      if (field.second.IsNull()) continue;
      if (!field.second.IsMap()) {
        return InvalidArgument(path + ": expected a mapping, got " + Describe(field.second));
      }
      for (const auto& sub : field.second) {
        if (!sub.first.IsScalar()) return InvalidArgument(path + ": keys must be strings");
        ADCTL_RETURN_IF_ERROR(add(path + "." + sub.first.Scalar(), sub.second));
      }
    }
  }
  if (flat->count(kBetas) && (flat->count("train.beta1") || flat->count("train.beta2"))) {
    return InvalidArgument("train.betas: give either betas or beta1/beta2, not both");
  }
  return Status::Ok();
}

Result<JobSpec> FromTree(const YAML::Node& root) {
  std::map<std::string, YAML::Node> flat;
  ADCTL_RETURN_IF_ERROR(Flatten(root, &flat));
  JobSpec spec;
  Status status;
  ForEachField(spec, [&](const char* path, auto& field) {
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

// Bounds on what a spec may ask for; README.md ("Job spec") lists them.
constexpr int64_t kMaxSteps = 1'000'000'000;
// Upper bounds of sizes (no real job comes near them; each keeps an allocation finite).
constexpr int64_t kMaxSamples = 10'000'000;             // data.num_samples (synthetic clips)
constexpr int64_t kMaxFrames = 1024;                    // data.frames, validation.frames
constexpr int64_t kMaxLatentSide = 1024;                // data.height/width (8192 pixels)
constexpr int64_t kMaxTextLen = 4096;                   // data.text_len (CLIP's is 77)
constexpr int64_t kMaxBatchLatents = int64_t{1} << 31;  // one micro-batch's latent values
constexpr int64_t kMaxPriority = 1'000'000;

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

Status CheckGraceSeconds(const std::string& field, double seconds) {
  ADCTL_RETURN_IF_ERROR(NonNegative(field.c_str(), seconds));
  return Within(field.c_str(), seconds, 0.0, kMaxGraceSeconds);
}

namespace {

// model.lora: its own numbers, and a base whose motion modules are trained (a LoRA on random
// ones learns nothing a user can load).
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
    if (p.window_placement != "random" && p.window_placement != "uniform") {
      return InvalidArgument("preprocess.window_placement: must be 'random' or 'uniform', got " +
                             Show(p.window_placement));
    }
  } else if (!s.preprocess.output.empty()) {
    return InvalidArgument("preprocess.output: only used by kind 'preprocess', got " +
                           Show(s.preprocess.output));
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
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("data.num_samples", d.num_samples, 1, kMaxSamples));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("data.frames", d.frames, 1, kMaxFrames));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("data.height", d.height, 1, kMaxLatentSide));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("data.width", d.width, 1, kMaxLatentSide));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("data.text_len", d.text_len, 1, kMaxTextLen));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("data.seed", d.seed, 0));
  if (m.preset == ModelPreset::kTiny) {
    if (d.frames > kTinyMaxFrames) {
      return InvalidArgument("data.frames: the tiny preset takes at most " +
                             std::to_string(kTinyMaxFrames) + " frames, got " + Show(d.frames));
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
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("train.max_steps", t.max_steps, 1, kMaxSteps));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("train.batch_size", t.batch_size, 1, 4096));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("train.grad_accum", t.grad_accum, 1, 65536));
  // One micro-batch's latents on a rank (4 channels); each factor is bounded above.
  const int64_t batch_latents = t.batch_size * d.frames * d.height * d.width * 4;
  if (batch_latents > kMaxBatchLatents) {
    return InvalidArgument(
        "train.batch_size x data.frames x data.height x data.width: one batch would hold " +
        std::to_string(batch_latents) + " latent values, at most " +
        std::to_string(kMaxBatchLatents) + " (lower the batch size or the clip size)");
  }
  ADCTL_RETURN_IF_ERROR(Positive("train.lr", t.lr));
  ADCTL_RETURN_IF_ERROR(Within("train.lr", t.lr, 0.0, 1.0));
  ADCTL_RETURN_IF_ERROR(UnitInterval("train.beta1", t.beta1));
  ADCTL_RETURN_IF_ERROR(UnitInterval("train.beta2", t.beta2));
  ADCTL_RETURN_IF_ERROR(NonNegative("train.weight_decay", t.weight_decay));
  ADCTL_RETURN_IF_ERROR(Positive("train.eps", t.eps));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("train.warmup_steps", t.warmup_steps, 0, kMaxSteps));
  ADCTL_RETURN_IF_ERROR(Finite("train.max_grad_norm", t.max_grad_norm));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("train.seed", t.seed, 0));
  ADCTL_RETURN_IF_ERROR(OneOf("train.nan_policy", t.nan_policy, {"fail", "rollback"}));
  if (!(t.rollback_lr_factor > 0 && t.rollback_lr_factor <= 1)) {
    return InvalidArgument("train.rollback_lr_factor: must be in (0, 1], got " +
                           Show(t.rollback_lr_factor));
  }
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("train.max_rollbacks", t.max_rollbacks, 0, 100));
  if (t.nan_policy == "rollback" && t.max_rollbacks > s.resources.max_restarts) {
    return InvalidArgument("train.max_rollbacks: " + Show(t.max_rollbacks) +
                           " is above resources.max_restarts (" + Show(s.resources.max_restarts) +
                           "): each rollback restarts the job");
  }
  ADCTL_RETURN_IF_ERROR(UnitInterval("train.caption_dropout", t.caption_dropout));
  if (t.beta_schedule == BetaSchedule::kPretrained && m.pretrained.empty()) {
    return InvalidArgument(
        "train.beta_schedule: 'pretrained' reads model.pretrained's scheduler/, which is not set");
  }
  ADCTL_RETURN_IF_ERROR(Positive("train.beta_start", t.beta_start));
  ADCTL_RETURN_IF_ERROR(Positive("train.beta_end", t.beta_end));
  if (t.beta_end >= 1) {
    return InvalidArgument("train.beta_end: must be < 1, got " + Show(t.beta_end));
  }
  if (t.beta_start > t.beta_end) {
    return InvalidArgument("train.beta_start: must be <= train.beta_end (" + Show(t.beta_end) +
                           "), got " + Show(t.beta_start));
  }
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("train.num_train_timesteps", t.num_train_timesteps, 2));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("train.log_every", t.log_every, 1));
  ADCTL_RETURN_IF_ERROR(Positive("train.bucket_cap_mb", t.bucket_cap_mb));
  const EmaSpec& ema = t.ema;
  ADCTL_RETURN_IF_ERROR(Finite("train.ema.decay", ema.decay));
  if (ema.decay < 0 || ema.decay >= 1) {
    return InvalidArgument(
        "train.ema.decay: must be in [0, 1) (0: no EMA; diffusers: 0.9999), got " +
        Show(ema.decay));
  }
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("train.ema.start_step", ema.start_step, 0));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("train.ema.update_every", ema.update_every, 1));
  ADCTL_RETURN_IF_ERROR(OneOf("train.ema.device", ema.device, {"gpu", "cpu"}));
  if (ema.enabled() && preprocess) {
    return InvalidArgument("train.ema: a preprocess job trains no weights to average");
  }
  // validation, eval and export may use the average instead of the weights.
  for (auto [path, weights] : {std::pair{"validation.weights", &s.validation.weights},
                               std::pair{"eval.weights", &s.eval.weights},
                               std::pair{"export.weights", &s.exports.weights}}) {
    ADCTL_RETURN_IF_ERROR(OneOf(path, *weights, {"raw", "ema"}));
    if (*weights == "ema" && !ema.enabled()) {
      return InvalidArgument(std::string(path) +
                             ": ema needs train.ema (set train.ema.decay, e.g. 0.9999)");
    }
  }

  // checkpoint
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("checkpoint.every_steps", s.checkpoint.every_steps, 0));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("checkpoint.keep_last", s.checkpoint.keep_last, 1));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("checkpoint.keep_every", s.checkpoint.keep_every, 0));
  const KeepBestSpec& best = s.checkpoint.keep_best;
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("checkpoint.keep_best.k", best.k, 0));
  ADCTL_RETURN_IF_ERROR(OneOf("checkpoint.keep_best.metric", best.metric, {"eval_loss"}));
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
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("validation.steps", v.steps, 1));
  if (v.steps > t.num_train_timesteps) {
    return InvalidArgument("validation.steps: at most train.num_train_timesteps (" +
                           Show(t.num_train_timesteps) + "), got " + Show(v.steps));
  }
  ADCTL_RETURN_IF_ERROR(Finite("validation.guidance", v.guidance));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("validation.seed", v.seed, 0));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("validation.frames", v.frames, 1, kMaxFrames));
  for (auto [path, px] :
       {std::pair{"validation.height", v.height}, std::pair{"validation.width", v.width}}) {
    if (px < 8 || px % 8 != 0) {
      return InvalidArgument(std::string(path) + ": must be a multiple of 8 (>= 8), got " +
                             Show(px));
    }
    ADCTL_RETURN_IF_ERROR(Within<int64_t>(path, px, 8, 8 * kMaxLatentSide));
  }
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("validation.every_steps", v.every_steps, 0));
  for (size_t i = 0; i < v.at_steps.size(); ++i) {
    ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>(
        ("validation.at_steps[" + std::to_string(i) + "]").c_str(), v.at_steps[i], 1));
  }
  ADCTL_RETURN_IF_ERROR(NonNegative("validation.eta", v.eta));
  ADCTL_RETURN_IF_ERROR(OneOf("validation.timestep_spacing", v.timestep_spacing,
                              {"leading", "trailing", "linspace"}));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("validation.steps_offset", v.steps_offset, 0));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("validation.fps", v.fps, 1));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("validation.decode_chunk", v.decode_chunk, 1));

  // eval
  const EvalSpec& e = s.eval;
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("eval.holdout_clips", e.holdout_clips, 0));
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
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("eval.every_steps", e.every_steps, 0));
  ADCTL_RETURN_IF_ERROR(AtLeast<int64_t>("eval.seed", e.seed, 0));

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
  constexpr double kDay = 86400;
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("resources.gpus", r.gpus, 1, 4096));
  ADCTL_RETURN_IF_ERROR(
      Within<int64_t>("resources.priority", r.priority, -kMaxPriority, kMaxPriority));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("resources.max_restarts", r.max_restarts, 0, 1000));
  ADCTL_RETURN_IF_ERROR(CheckGraceSeconds("resources.grace_seconds", r.grace_seconds));
  ADCTL_RETURN_IF_ERROR(
      Positive("resources.rendezvous_timeout_seconds", r.rendezvous_timeout_seconds));
  ADCTL_RETURN_IF_ERROR(
      Within("resources.rendezvous_timeout_seconds", r.rendezvous_timeout_seconds, 0.0, kDay));
  ADCTL_RETURN_IF_ERROR(NonNegative("resources.hang_timeout_seconds", r.hang_timeout_seconds));
  ADCTL_RETURN_IF_ERROR(
      Within("resources.hang_timeout_seconds", r.hang_timeout_seconds, 0.0, 7 * kDay));
  ADCTL_RETURN_IF_ERROR(NonNegative("resources.peak_tflops", r.peak_tflops));
  if (!r.launcher.empty()) {
    ADCTL_RETURN_IF_ERROR(OneOf("resources.launcher", r.launcher, {"local", "slurm"}));
  }
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("resources.nodes", r.nodes, 1, 4096));
  ADCTL_RETURN_IF_ERROR(Within<int64_t>("resources.gpus_per_node", r.gpus_per_node, 0, 64));
  const bool slurm_fields = r.nodes != 1 || r.gpus_per_node != 0 || !r.slurm_account.empty() ||
                            !r.slurm_partition.empty() || !r.slurm_qos.empty() ||
                            !r.slurm_time_limit.empty() || !r.slurm_extra_args.empty();
  if (r.launcher == "local" && slurm_fields) {
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
  if (r.preemptible && r.launcher == "slurm") {
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
  ForEachField(spec, [&](const char* path_c, const auto& value) {
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
  using Value = std::variant<std::string, int64_t, double, bool, std::vector<std::string>,
                             std::vector<int64_t>, std::vector<DataSource>>;
  auto collect = [](const JobSpec& s) {
    std::vector<Value> values;
    ForEachField(s, [&](const char*, const auto& v) {
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
  ForEachField(spec, [&](const char* path, auto&) {
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
