// The PromQL of deploy/: every expression in the Grafana dashboards' panels and in the rule files
// named by deploy/prometheus/prometheus.yml, read from those files (nlohmann-json, yaml-cpp) so
// the tests follow whatever the files say. Used by dashboard_test.cc and scrape_test.cc.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace adctl::testing {

// deploy/ in the source tree (set by CMake).
std::string DeployDir();

// Families only GPU ranks / GPUs have (docs/metrics.md): a CPU job legitimately lacks them, so
// scrape_test.cc lets expressions over them come back empty, and dashboard_test.cc checks that
// adctld exports each of them.
const std::set<std::string>& GpuOnlyFamilies();
// Families only preprocess jobs have: a training job lacks them, as above.
const std::set<std::string>& PreprocessOnlyFamilies();

struct PromExpr {
  std::string where;  // "adctl-job.json: panel 7 \"Loss\" target A", "alerts.yml: AdctlGpuIdle"
  std::string expr;
  bool alert = false;  // an alerting rule's condition
  std::string record;  // a recording rule's name
};

// A dashboard variable that Grafana fills from label_values(<selector>, <label>).
struct DashboardVariable {
  std::string dashboard;
  std::string name;
  std::string query;     // as written: "label_values(adctl_train_global_step, job_id)"
  std::string selector;  // "adctl_train_global_step" ("" when not label_values)
  std::string label;     // "job_id"
  bool include_all = false;
  std::string all_value;  // the regex that "All" stands for
};

// Every dashboard JSON file (sorted paths).
std::vector<std::string> DashboardFiles();
// The targets' expressions of every panel (rows' nested panels included) of every dashboard.
std::vector<PromExpr> DashboardExprs();
std::vector<DashboardVariable> DashboardVariables();
// The rule files prometheus.yml names (absolute) and every rule in them.
std::vector<std::string> RuleFiles();
std::vector<PromExpr> RuleExprs();
// The uid of the provisioned Prometheus datasource.
std::string ProvisionedDatasourceUid();

// The metric names an expression selects: identifiers outside strings, label matchers, ranges,
// function calls, aggregation operators, keywords and label lists (by/without/on/ignoring/
// group_left/group_right).
std::set<std::string> MetricNames(const std::string& expr);
// The dashboard variables ($x, ${x}) an expression uses.
std::set<std::string> VariablesUsed(const std::string& expr);
// Replaces $__rate_interval (and $__interval, $__range) and `values`' variables.
std::string Substitute(const std::string& expr, const std::map<std::string, std::string>& values);

}  // namespace adctl::testing
