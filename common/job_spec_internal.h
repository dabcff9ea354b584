// What job_spec.cc (parsing, emission), job_spec_tree.cc (the YAML tree) and
// job_spec_validate.cc (ValidateJobSpec) share. Not for use outside those files.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl::job_spec_internal {

// Shortest decimal form that reads back to the same double ("0.0001", "1e-08", "60").
std::string FormatDouble(double v);
// The byte offset of the first ill-formed UTF-8 sequence (overlongs, surrogates and code points
// past U+10FFFF included); nullopt when `text` is well-formed.
std::optional<size_t> FirstInvalidUtf8(const std::string& text);

// Bounds on what a spec may ask for; docs/job-spec.md lists them.
constexpr int64_t kMaxSteps = 1'000'000'000;
// Upper bounds of sizes (no real job comes near them; each keeps an allocation finite).
constexpr int64_t kMaxSamples = 10'000'000;             // data.num_samples (synthetic clips)
constexpr int64_t kMaxFrames = 1024;                    // data.frames, validation.frames
constexpr int64_t kMaxLatentSide = 1024;                // data.height/width (8192 pixels)
constexpr int64_t kMaxTextLen = 4096;                   // data.text_len (CLIP's is 77)
constexpr int64_t kMaxBatchLatents = int64_t{1} << 31;  // one micro-batch's latent values
constexpr int64_t kMaxPriority = 1'000'000;
constexpr double kDay = 86400;

// A number field's range, written on the field's line in ForEachField (job_spec.cc), so that a
// new field with a range is that one line. ValidateJobSpec checks every such bound before
// anything that depends on other fields. Refusals name the field: "data.frames: must be in
// [1, 1024], got 0", "train.eps: must be > 0, got 0".
struct Bound {
  enum class Kind { kAtLeast, kWithin, kPositive, kNonNegative };
  Kind kind;
  double min = 0;
  double max = 0;

  static constexpr Bound AtLeast(double min) { return {Kind::kAtLeast, min, 0}; }
  static constexpr Bound Within(double min, double max) { return {Kind::kWithin, min, max}; }
  // > 0 and finite.
  static constexpr Bound Positive() { return {Kind::kPositive, 0, 0}; }
  // >= 0 and finite.
  static constexpr Bound NonNegative() { return {Kind::kNonNegative, 0, 0}; }
};
Status CheckBound(const char* path, int64_t value, const Bound& bound);
Status CheckBound(const char* path, double value, const Bound& bound);

// The first field outside a bound on its ForEachField line; Ok when there is none.
Status CheckFieldBounds(const JobSpec& spec);

// ---- The YAML tree (job_spec_tree.cc) ----------------------------------------------------------

// "train.betas": the pair train.beta1/beta2 as one list, a path of its own.
constexpr const char* kBetas = "train.betas";
// Every dotted path the parser accepts: the struct fields plus kBetas (job_spec.cc).
const std::set<std::string>& KnownPaths();
// "train" and the other top-level mappings; "model.lora" and the mappings one level further.
bool IsSection(const std::string& key);
bool IsSubsection(const std::string& path);
// "null", "'text'", "a sequence", "a mapping": what a node is, for messages.
std::string Describe(const YAML::Node& node);
// "unknown field 'train.lrr' (did you mean 'train.lr'?)".
Status UnknownField(const std::string& path);
// The YAML of `text`; an error naming `what` and the line and column otherwise.
Result<YAML::Node> LoadYaml(const std::string& text, const std::string& what);
// Applies one "a.b=value" override to the tree (root is a mapping).
Status ApplyOverride(YAML::Node& root, const std::string& override_text);
// Checks the tree's shape (mappings, known keys, no duplicates) and flattens it to dotted
// path → node.
Status Flatten(const YAML::Node& root, std::map<std::string, YAML::Node>* flat);

}  // namespace adctl::job_spec_internal
