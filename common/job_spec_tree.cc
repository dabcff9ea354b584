// The job spec's YAML tree before it becomes a JobSpec (job_spec.cc): its sections and
// subsections, unknown keys with a near miss suggested, `--set a.b=value` overrides applied to
// the tree, and the tree flattened to dotted paths with its shape checked.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/job_spec_internal.h"

namespace adctl::job_spec_internal {

namespace {

constexpr const char* kSections[] = {"model",      "data", "preprocess", "train",     "checkpoint",
                                     "validation", "eval", "export",     "resources", "notify"};
// Mappings one level further down: `model: {lora: {rank: 64}}` is model.lora.rank.
constexpr const char* kSubsections[] = {"model.lora", "train.ema", "checkpoint.keep_best"};

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

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

bool IsSubsection(const std::string& path) {
  for (const char* s : kSubsections) {
    if (path == s) return true;
  }
  return false;
}

bool IsSection(const std::string& key) {
  for (const char* s : kSections) {
    if (key == s) return true;
  }
  return false;
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

Result<YAML::Node> LoadYaml(const std::string& text, const std::string& what) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(what + ": YAML error at line " + std::to_string(e.mark.line + 1) +
                           ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
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

}  // namespace adctl::job_spec_internal
