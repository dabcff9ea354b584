#include "server/config/adctld_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

namespace adctl {

namespace {

void Flatten(const YAML::Node& node, const std::string& prefix,
             const std::vector<std::string>& enabling_sections, std::vector<CLI::ConfigItem>* out) {
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string name = prefix.empty() ? key : prefix + "-" + key;
    const YAML::Node& value = kv.second;
    CLI::ConfigItem item;
    item.name = name;
    if (value.IsMap() && name == "worker-env") {
      for (const auto& env : value) {
        item.inputs.push_back(env.first.as<std::string>() + "=" + env.second.as<std::string>());
      }
    } else if (value.IsMap()) {
      // A launcher's section (`slurm:`) is its flag (--slurm) as well as its options.
      if (std::find(enabling_sections.begin(), enabling_sections.end(), name) !=
          enabling_sections.end()) {
        out->push_back(CLI::ConfigItem{{}, name, {"true"}});
      }
      Flatten(value, name, enabling_sections, out);
      continue;
    } else if (value.IsSequence()) {
      for (const auto& v : value) item.inputs.push_back(v.as<std::string>());
    } else if (value.IsNull()) {
      continue;
    } else {
      item.inputs.push_back(value.as<std::string>());
    }
    out->push_back(std::move(item));
  }
}

}  // namespace

std::vector<CLI::ConfigItem> YamlConfig::from_config(std::istream& input) const {
  std::stringstream text;
  text << input.rdbuf();
  std::vector<CLI::ConfigItem> items;
  try {
    const YAML::Node root = YAML::Load(text.str());
    if (root.IsNull()) return items;
    if (!root.IsMap()) throw CLI::ConfigError("--config: expected a YAML map of flag names");
    Flatten(root, "", enabling_sections_, &items);
  } catch (const YAML::Exception& e) {
    throw CLI::ConfigError(std::string("--config: not valid YAML: ") + e.what());
  }
  return items;
}

}  // namespace adctl
