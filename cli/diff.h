// `adctl diff A B`: two runs side by side. The spec fields that differ (dotted path, A's value,
// B's value), compared on the canonical spec of each job (Job.spec_yaml, parsed again, so a
// field written differently but meaning the same is no difference), and the latest metrics.
//
// DiffSpecs and the rendering are plain functions (tests/cli/diff_test.cc); Diff makes the two
// GetJob calls. Thread-compatible.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "adctl/v1/job_service.pb.h"
#include "cli/client.h"
#include "common/status.h"

namespace adctl::cli {

// One spec field whose values differ. A value is the canonical YAML's text ("0.0001", "tiny",
// "[0.9, 0.999]", "\"\"" for an empty string); a field the canonical YAML leaves out (the
// launcher fields when unset, model.lora.* without a LoRA) is "(unset)".
struct SpecDifference {
  std::string path;  // "train.lr"
  std::string a;
  std::string b;
};

// The fields of spec A and spec B (YAML job specs) that differ, in the canonical order
// (JobSpecFieldPaths). InvalidArgument naming "spec A" or "spec B" when one does not parse.
Result<std::vector<SpecDifference>> DiffSpecs(const std::string& spec_a, const std::string& spec_b);

// A job's latest numbers as adctld reports them (Job.progress). learning_rate and eval_loss
// are read when the API's Progress carries them (fields of those names); nullopt otherwise.
struct LatestMetrics {
  std::string job_id;
  std::string name;
  std::string state;  // "SUCCEEDED"
  int64_t step = 0;
  int64_t total_steps = 0;
  std::optional<double> loss;  // nullopt before the first step
  std::optional<double> learning_rate;
  std::optional<double> clips_per_second;
  std::optional<double> eval_loss;
};
LatestMetrics LatestMetricsOf(const v1::Job& job);

// The table `adctl diff` prints, and its `-o json` object:
// {"jobs": [A, B], "spec_diff": [{"field", "a", "b"}...], "metrics": [{...A}, {...B}]}
// (absent numbers are null).
std::string RenderDiffTable(const std::vector<SpecDifference>& diff, const LatestMetrics& a,
                            const LatestMetrics& b);
nlohmann::json DiffToJson(const std::vector<SpecDifference>& diff, const LatestMetrics& a,
                          const LatestMetrics& b);

// adctl diff A B: exit 0, or the exit code of a failed call (unknown id: 2) after printing why.
int Diff(Client& client, bool json, const std::string& job_a, const std::string& job_b);

}  // namespace adctl::cli
