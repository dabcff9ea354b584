#include "cli/diff.h"

#include <google/protobuf/descriptor.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/render.h"
#include "common/job_spec.h"

namespace adctl::cli {
namespace {

constexpr const char* kUnset = "(unset)";

// The node at a dotted path ("model.lora.rank") of a parsed canonical spec; an invalid node when
// the canonical YAML leaves the field out.
YAML::Node NodeAt(const YAML::Node& root, const std::string& path) {
  YAML::Node node;
  node.reset(root);  // reset() rebinds; `node = x` would write into the tree
  std::stringstream parts(path);
  std::string key;
  while (std::getline(parts, key, '.')) {
    if (!node.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node child = static_cast<const YAML::Node&>(node)[key];  // const: no insert
    if (!child.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    node.reset(child);
  }
  return node;
}

std::string ValueText(const YAML::Node& node) {
  if (!node.IsDefined()) return kUnset;
  if (node.IsScalar()) return node.Scalar().empty() ? "\"\"" : node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// Every field of `spec_yaml`'s canonical form as (path, text), in JobSpecFieldPaths' order. The
// spec is parsed (and so validated) first: the text compared is what JobSpecToYaml writes.
Result<std::vector<std::pair<std::string, std::string>>> CanonicalFields(
    const std::string& spec_yaml, const std::string& which) {
  auto spec = ParseJobSpec(spec_yaml);
  if (!spec.ok()) return InvalidArgument(which + ": " + spec.status().message());
  const YAML::Node root = YAML::Load(JobSpecToYaml(*spec));
  std::vector<std::pair<std::string, std::string>> fields;
  for (const std::string& path : JobSpecFieldPaths()) {
    fields.emplace_back(path, ValueText(NodeAt(root, path)));
  }
  return fields;
}

// Progress's double field `name` when this build's API has one.
std::optional<double> ProgressDouble(const v1::Progress& progress, const char* name) {
  const auto* field = progress.GetDescriptor()->FindFieldByName(name);
  if (field == nullptr || field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE) {
    return std::nullopt;
  }
  return progress.GetReflection()->GetDouble(progress, field);
}

std::string Number(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char buf[64];
  snprintf(buf, sizeof(buf), format, *v);
  return buf;
}

nlohmann::json JsonNumber(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json MetricsJson(const LatestMetrics& m) {
  return {{"job_id", m.job_id},
          {"name", m.name},
          {"state", m.state},
          {"step", m.step},
          {"total_steps", m.total_steps},
          {"loss", JsonNumber(m.loss)},
          {"learning_rate", JsonNumber(m.learning_rate)},
          {"clips_per_second", JsonNumber(m.clips_per_second)},
          {"eval_loss", JsonNumber(m.eval_loss)}};
}

std::string Heading(const LatestMetrics& m) { return m.job_id + " (" + m.name + ")"; }

}  // namespace

Result<std::vector<SpecDifference>> DiffSpecs(const std::string& spec_a,
                                              const std::string& spec_b) {
  auto a = CanonicalFields(spec_a, "spec A");
  if (!a.ok()) return a.status();
  auto b = CanonicalFields(spec_b, "spec B");
  if (!b.ok()) return b.status();
  std::vector<SpecDifference> diff;
  // Both lists come from JobSpecFieldPaths(): the same paths in the same order.
  for (size_t i = 0; i < a->size(); ++i) {
    const auto& [path, value_a] = (*a)[i];
    const std::string& value_b = (*b)[i].second;
    if (value_a != value_b) diff.push_back({path, value_a, value_b});
  }
  return diff;
}

LatestMetrics LatestMetricsOf(const v1::Job& job) {
  const v1::Progress& p = job.progress();
  LatestMetrics m;
  m.job_id = job.id();
  m.name = job.name();
  m.state = StateName(job.state());
  m.step = p.step();
  m.total_steps = p.total_steps();
  if (p.step() > 0) {
    m.loss = p.loss();
    m.clips_per_second = p.clips_per_second();
    m.learning_rate = ProgressDouble(p, "learning_rate");
    // 0: no eval step yet (a loss is never exactly 0).
    if (auto eval = ProgressDouble(p, "eval_loss"); eval && *eval > 0) m.eval_loss = eval;
  }
  return m;
}

std::string RenderDiffTable(const std::vector<SpecDifference>& diff, const LatestMetrics& a,
                            const LatestMetrics& b) {
  std::string out;
  if (diff.empty()) {
    out += "specs: no field differs\n";
  } else {
    Table fields({"FIELD", Heading(a), Heading(b)});
    for (const SpecDifference& d : diff) fields.Add({d.path, d.a, d.b});
    out += fields.ToString();
  }
  out += "\n";
  auto steps = [](const LatestMetrics& m) {
    return m.total_steps > 0 ? std::to_string(m.step) + "/" + std::to_string(m.total_steps)
                             : std::string("-");
  };
  Table metrics({"LATEST", Heading(a), Heading(b)});
  metrics.Add({"state", a.state, b.state});
  metrics.Add({"step", steps(a), steps(b)});
  metrics.Add({"loss", Number(a.loss, "%.4f"), Number(b.loss, "%.4f")});
  metrics.Add({"learning rate", Number(a.learning_rate, "%.6g"), Number(b.learning_rate, "%.6g")});
  metrics.Add({"clips/s", Number(a.clips_per_second, "%.2f"), Number(b.clips_per_second, "%.2f")});
  if (a.eval_loss || b.eval_loss) {
    metrics.Add({"eval loss", Number(a.eval_loss, "%.4f"), Number(b.eval_loss, "%.4f")});
  }
  out += metrics.ToString();
  return out;
}

nlohmann::json DiffToJson(const std::vector<SpecDifference>& diff, const LatestMetrics& a,
                          const LatestMetrics& b) {
  nlohmann::json fields = nlohmann::json::array();
  for (const SpecDifference& d : diff)
    fields.push_back({{"field", d.path}, {"a", d.a}, {"b", d.b}});
  return {{"jobs", {a.job_id, b.job_id}},
          {"spec_diff", fields},
          {"metrics", {MetricsJson(a), MetricsJson(b)}}};
}

int Diff(Client& client, bool json, const std::string& job_a, const std::string& job_b) {
  v1::Job a, b;
  v1::GetJobRequest req;
  req.set_job_id(job_a);
  if (int rc = client.Call(&v1::JobService::Stub::GetJob, req, &a); rc != 0) return rc;
  req.set_job_id(job_b);
  if (int rc = client.Call(&v1::JobService::Stub::GetJob, req, &b); rc != 0) return rc;
  auto diff = DiffSpecs(a.spec_yaml(), b.spec_yaml());
  if (!diff.ok()) {
    // A stored spec this adctl cannot read: adctld and adctl of different versions.
    std::cerr << "adctl: " << diff.status().message() << " (" << (a.id() + ", " + b.id()) << ")\n";
    return kExitFailed;
  }
  const LatestMetrics latest_a = LatestMetricsOf(a), latest_b = LatestMetricsOf(b);
  if (json) {
    std::cout << DiffToJson(*diff, latest_a, latest_b).dump(2) << "\n";
  } else {
    std::cout << RenderDiffTable(*diff, latest_a, latest_b);
  }
  return 0;
}

}  // namespace adctl::cli
