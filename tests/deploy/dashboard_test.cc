// deploy/ without a running Prometheus: each Grafana dashboard has what Grafana needs (title,
// uid, schemaVersion, panels with id/type/gridPos/targets, the provisioned datasource uid,
// well-formed variables), the provisioning files agree with them, and every metric name in a
// PromQL expression (dashboards and rules) is one adctld exports or a recording rule defines.
// "Exports" is asked of adctld's own code: a JobMetrics fed one of everything (a GPU rank, a
// checkpoint, a restart, a held device) lists its families.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "server/metrics/job_metrics.h"
#include "tests/deploy/deploy_files.h"
#include "tests/testing/temp_store.h"

namespace adctl::testing {
namespace {

using nlohmann::json;

// Every sample name adctld's exporter can produce (histograms: _bucket, _sum, _count).
std::set<std::string> ExportedNames() {
  const TempDir tmp;
  const std::string dir = tmp.path();
  std::set<std::string> names;
  {
    auto store = OpenTestStore(tmp);
    JobRecord j;
    j.id = "j-1";
    j.name = "tiny";
    j.spec_yaml = "name: tiny\n";
    j.token = "t";
    j.job_dir = dir + "/jobs/j-1";
    j.gpus = 1;
    j.submitted_at = NowSeconds();
    EXPECT_TRUE(store->InsertJob(j).ok());
    JobMetrics metrics(store.get());
    Device gpu;
    gpu.name = "0";
    gpu.kind = "gpu";
    gpu.model = "NVIDIA H200";
    gpu.uuid = "GPU-0";
    gpu.reading = {0.9, 1 << 30, 2LL << 30, 400, 60, 1.9e9};
    metrics.AttachDevices({gpu}, [gpu] { return std::vector<DeviceStatus>{{gpu, "j-1", 0}}; });
    MetricRecord m;
    m.job_id = "j-1";
    m.attempt = 1;
    m.step = 1;
    m.total_steps = 10;
    m.step_seconds = 0.3;
    m.clips_per_second = 3;
    m.peak_memory_bytes = 1 << 20;
    m.mfu_ratio = 0.2;
    m.gpu_utilization = 0.9;
    m.gpu_memory_used_bytes = 1 << 30;
    m.gpu_memory_total_bytes = 2LL << 30;
    m.gpu_power_watts = 400;
    m.gpu_temperature_celsius = 60;
    m.gpu_sm_clock_hertz = 1.9e9;
    metrics.OnMetrics({m});
    // A preprocess job's rank: the adctl_preprocess_* families.
    j.id = "j-2";
    j.spec_yaml =
        "name: cache\nkind: preprocess\nmodel: {pretrained: /m}\n"
        "data: {kind: video, csv: /d/v.csv, video_dir: /d}\npreprocess: {output: /c}\n";
    j.job_dir = dir + "/jobs/j-2";
    EXPECT_TRUE(store->InsertJob(j).ok());
    MetricRecord shard = m;
    shard.job_id = "j-2";
    shard.samples_seen = 2;
    metrics.OnMetrics({shard});
    CheckpointRecord c;
    c.job_id = "j-1";
    c.step = 1;
    c.size_bytes = 1;
    metrics.OnCheckpoint(c);
    metrics.OnRestart("j-1");
    metrics.Scrape();
    for (const auto& family : metrics.registry().Collect()) {
      names.insert(family.name);
      if (family.type == prometheus::MetricType::Histogram) {
        for (const char* suffix : {"_bucket", "_sum", "_count"}) names.insert(family.name + suffix);
      }
    }
  }
  return names;
}

std::set<std::string> RecordedNames() {
  std::set<std::string> out;
  for (const PromExpr& e : RuleExprs()) {
    if (!e.record.empty()) out.insert(e.record);
  }
  return out;
}

json Load(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST(DeployFilesTest, MetricNamesParsesPromQl) {
  EXPECT_EQ(MetricNames("sum by (job_id, le) (rate(a_bucket{job_id=\"$job_id\", x=~\"y|z\"}"
                        "[$__rate_interval]))"),
            (std::set<std::string>{"a_bucket"}));
  EXPECT_EQ(MetricNames("histogram_quantile(0.99, sum by (le) (rate(b[5m]))) / c offset 30m"),
            (std::set<std::string>{"b", "c"}));
  EXPECT_EQ(MetricNames("(x < 0.05) * on (gpu) group_left (job_id) y{kind=\"gpu\"} and "
                        "j:z:count > 0 or abs(x) == +Inf or vector(0)"),
            (std::set<std::string>{"x", "y", "j:z:count"}));
  EXPECT_EQ(Substitute("a{job_id=\"$job_id\", rank=~\"${rank}\"}[$__rate_interval]",
                       {{"job_id", "j-1"}, {"rank", ".*"}}),
            "a{job_id=\"j-1\", rank=~\".*\"}[1m]");
}

TEST(DashboardTest, ProvisioningNamesTheDatasourceAndTheDashboardFolder) {
  const std::string uid = ProvisionedDatasourceUid();
  EXPECT_EQ(uid, "adctl-prometheus");
  const YAML::Node providers =
      YAML::LoadFile(DeployDir() + "/grafana/provisioning/dashboards/adctl.yml");
  EXPECT_EQ(providers["apiVersion"].as<int>(), 1);
  ASSERT_EQ(providers["providers"].size(), 1u);
  const YAML::Node p = providers["providers"][0];
  EXPECT_EQ(p["type"].as<std::string>(), "file");
  EXPECT_FALSE(p["options"]["path"].as<std::string>().empty());
}

// Grafana's required fields, recursively through rows.
void CheckPanels(const json& panels, const std::string& uid, const std::set<std::string>& vars,
                 std::set<int>* ids, const std::string& file) {
  ASSERT_TRUE(panels.is_array()) << file;
  for (const json& p : panels) {
    SCOPED_TRACE(file + ": panel " + p.dump().substr(0, 120));
    ASSERT_TRUE(p.contains("id") && p["id"].is_number_integer());
    EXPECT_TRUE(ids->insert(p["id"].get<int>()).second) << "duplicate panel id " << p["id"];
    ASSERT_TRUE(p.contains("type") && p["type"].is_string());
    EXPECT_FALSE(p.value("title", "").empty());
    ASSERT_TRUE(p.contains("gridPos"));
    for (const char* k : {"h", "w", "x", "y"}) {
      ASSERT_TRUE(p["gridPos"].contains(k) && p["gridPos"][k].is_number_integer()) << k;
    }
    EXPECT_GE(p["gridPos"]["w"].get<int>(), 1);
    EXPECT_LE(p["gridPos"]["x"].get<int>() + p["gridPos"]["w"].get<int>(), 24);
    if (p["type"] == "row") {
      if (p.contains("panels")) CheckPanels(p["panels"], uid, vars, ids, file);
      continue;
    }
    ASSERT_TRUE(p.contains("datasource"));
    EXPECT_EQ(p["datasource"].value("uid", ""), uid);
    EXPECT_EQ(p["datasource"].value("type", ""), "prometheus");
    ASSERT_TRUE(p.contains("targets") && p["targets"].is_array() && !p["targets"].empty());
    std::set<std::string> ref_ids;
    for (const json& t : p["targets"]) {
      ASSERT_TRUE(t.contains("refId") && t["refId"].is_string());
      EXPECT_TRUE(ref_ids.insert(t["refId"].get<std::string>()).second) << t["refId"];
      ASSERT_TRUE(t.contains("expr") && t["expr"].is_string());
      EXPECT_FALSE(t["expr"].get<std::string>().empty());
      if (t.contains("datasource")) {
        EXPECT_EQ(t["datasource"].value("uid", ""), uid);
      }
      for (const std::string& v : VariablesUsed(t["expr"])) {
        EXPECT_TRUE(vars.count(v) || v.rfind("__", 0) == 0) << "undefined variable $" << v;
      }
    }
  }
}

TEST(DashboardTest, EachDashboardHasWhatGrafanaNeeds) {
  const std::string uid = ProvisionedDatasourceUid();
  const auto files = DashboardFiles();
  ASSERT_GE(files.size(), 3u);
  std::set<std::string> uids, titles;
  for (const std::string& path : files) {
    SCOPED_TRACE(path);
    const json d = Load(path);
    ASSERT_TRUE(d.is_object());
    ASSERT_TRUE(d.contains("title") && d["title"].is_string());
    EXPECT_TRUE(titles.insert(d["title"].get<std::string>()).second);
    ASSERT_TRUE(d.contains("uid") && d["uid"].is_string());
    const std::string duid = d["uid"];
    EXPECT_TRUE(std::regex_match(duid, std::regex("[A-Za-z0-9_-]{1,40}"))) << duid;
    EXPECT_TRUE(uids.insert(duid).second) << "duplicate uid " << duid;
    ASSERT_TRUE(d.contains("schemaVersion") && d["schemaVersion"].is_number_integer());
    EXPECT_GE(d["schemaVersion"].get<int>(), 30);
    EXPECT_FALSE(d.contains("id") && !d["id"].is_null()) << "a provisioned dashboard has no id";
    std::set<std::string> vars;
    if (d.contains("templating")) {
      ASSERT_TRUE(d["templating"].contains("list") && d["templating"]["list"].is_array());
      for (const json& v : d["templating"]["list"]) {
        const std::string name = v.value("name", "");
        EXPECT_TRUE(std::regex_match(name, std::regex("[A-Za-z_][A-Za-z0-9_]*"))) << v.dump();
        EXPECT_TRUE(vars.insert(name).second) << "duplicate variable " << name;
        ASSERT_TRUE(v.contains("type"));
        if (v["type"] != "query") continue;
        EXPECT_EQ(v["datasource"].value("uid", ""), uid) << name;
        const json q = v.value("query", json());
        EXPECT_TRUE((q.is_string() && !q.get<std::string>().empty()) ||
                    (q.is_object() && !q.value("query", "").empty()))
            << name;
        EXPECT_TRUE(v.contains("refresh") && v["refresh"].is_number_integer()) << name;
        if (v.value("includeAll", false)) {
          EXPECT_TRUE(v.contains("allValue")) << name;
        }
      }
    }
    std::set<int> ids;
    ASSERT_TRUE(d.contains("panels") && !d["panels"].empty());
    CheckPanels(d["panels"], uid, vars, &ids, path);
  }
  // Every variable's query is label_values(<selector>, <label>), which the scrape test runs.
  for (const DashboardVariable& v : DashboardVariables()) {
    EXPECT_FALSE(v.selector.empty()) << v.dashboard << ": $" << v.name << " = " << v.query;
  }
}

TEST(DashboardTest, EveryMetricNameIsExportedOrRecorded) {
  const std::set<std::string> exported = ExportedNames();
  const std::set<std::string> recorded = RecordedNames();
  ASSERT_GT(exported.size(), 20u);
  for (const std::string& name : GpuOnlyFamilies()) {
    EXPECT_TRUE(exported.count(name)) << "GPU-only family " << name << " is not exported";
  }
  for (const std::string& name : PreprocessOnlyFamilies()) {
    EXPECT_TRUE(exported.count(name)) << "preprocess family " << name << " is not exported";
  }
  std::vector<PromExpr> all = DashboardExprs();
  const auto rules = RuleExprs();
  all.insert(all.end(), rules.begin(), rules.end());
  for (const DashboardVariable& v : DashboardVariables()) {
    PromExpr e;
    e.where = v.dashboard + ": $" + v.name;
    e.expr = v.selector;
    all.push_back(e);
  }
  ASSERT_GT(all.size(), 40u);
  for (const PromExpr& e : all) {
    const auto names = MetricNames(e.expr);
    EXPECT_FALSE(names.empty()) << e.where << ": " << e.expr;
    for (const std::string& name : names) {
      EXPECT_TRUE(exported.count(name) || recorded.count(name) || name == "up")
          << e.where << ": " << name << " is neither exported by adctld nor recorded";
    }
  }
  // Recording rules are all used by a dashboard or an alert.
  std::set<std::string> used;
  for (const PromExpr& e : all) {
    for (const std::string& n : MetricNames(e.expr)) used.insert(n);
  }
  for (const std::string& r : recorded) EXPECT_TRUE(used.count(r)) << r << " is never used";
}

}  // namespace
}  // namespace adctl::testing
