// adctld's configuration file (`adctld --config adctld.yaml`): YAML whose keys are adctld's
// long flag names without the dashes; a map nests names ("slurm: {partition: gpu}" is
// --slurm-partition gpu, and a section named in `enabling_sections`, like `slurm:`, also sets the
// flag of its name, --slurm); a list is a repeated flag;
// `worker-env` may be a map of K: V. Flags on the command line override the file. An unknown key is
// an error naming it (CLI11's config handling with this reader: README "Configuration").
// Thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <istream>
#include <string>
#include <utility>
#include <vector>

namespace adctl {

class YamlConfig : public CLI::Config {
 public:
  explicit YamlConfig(std::vector<std::string> enabling_sections = {})
      : enabling_sections_(std::move(enabling_sections)) {}

  // The file's items, flattened ("slurm.partition" → "slurm-partition"). Throws
  // CLI::ConfigError with the YAML error's line when the file is not YAML or not a map.
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;
  // Writing a configuration is not supported (adctld never writes one).
  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return ""; }

 private:
  // Sections that set the boolean flag of their own name ("slurm": --slurm).
  std::vector<std::string> enabling_sections_;
};

}  // namespace adctl
