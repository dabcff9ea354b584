#include "tests/deploy/deploy_files.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <stdexcept>

namespace adctl::testing {

namespace fs = std::filesystem;
using nlohmann::json;

const std::set<std::string>& GpuOnlyFamilies() {
  static const std::set<std::string> kFamilies = {
      "adctl_rank_gpu_power_watts",    "adctl_rank_gpu_temperature_celsius",
      "adctl_rank_gpu_sm_clock_hertz", "adctl_gpu_power_watts",
      "adctl_gpu_temperature_celsius", "adctl_gpu_sm_clock_hertz",
      "adctl_train_mfu_ratio",         "adctl_train_peak_memory_bytes"};
  return kFamilies;
}

const std::set<std::string>& PreprocessOnlyFamilies() {
  static const std::set<std::string> kFamilies = {
      "adctl_preprocess_videos_skipped", "adctl_preprocess_shards_written",
      "adctl_preprocess_shards", "adctl_preprocess_clips_written",
      "adctl_preprocess_videos_per_second"};
  return kFamilies;
}

std::string DeployDir() { return ADCTL_DEPLOY_DIR; }

namespace {

json LoadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

void CollectPanelExprs(const std::string& file, const json& panels, std::vector<PromExpr>* out) {
  for (const json& p : panels) {
    if (p.contains("panels")) CollectPanelExprs(file, p["panels"], out);
    for (const json& t : p.value("targets", json::array())) {
      if (!t.contains("expr")) continue;
      PromExpr e;
      e.where = file + ": panel " + std::to_string(p.value("id", 0)) + " \"" +
                p.value("title", "") + "\" target " + t.value("refId", "?");
      e.expr = t["expr"].get<std::string>();
      out->push_back(e);
    }
  }
}

bool IsIdentStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsIdent(char c) { return IsIdentStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// Index just past the bracket that closes the one at `i` (strings skipped).
size_t SkipBracket(const std::string& s, size_t i, char open, char close) {
  int depth = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      for (++i; i < s.size() && s[i] != c; ++i) {
        if (s[i] == '\\' && c != '`') ++i;
      }
    } else if (c == open) {
      ++depth;
    } else if (c == close && --depth == 0) {
      return i + 1;
    }
  }
  return s.size();
}

size_t SkipSpace(const std::string& s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

}  // namespace

std::vector<std::string> DashboardFiles() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(DeployDir() + "/grafana/dashboards")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<PromExpr> DashboardExprs() {
  std::vector<PromExpr> out;
  for (const std::string& path : DashboardFiles()) {
    CollectPanelExprs(fs::path(path).filename().string(), LoadJson(path).value("panels", json()),
                      &out);
  }
  return out;
}

std::vector<DashboardVariable> DashboardVariables() {
  static const std::regex label_values(
      R"(^\s*label_values\(\s*(.*)\s*,\s*([A-Za-z_]\w*)\s*\)\s*$)");
  std::vector<DashboardVariable> out;
  for (const std::string& path : DashboardFiles()) {
    const json d = LoadJson(path);
    if (!d.contains("templating")) continue;
    for (const json& v : d["templating"].value("list", json::array())) {
      DashboardVariable var;
      var.dashboard = fs::path(path).filename().string();
      var.name = v.value("name", "");
      const json q = v.value("query", json());
      var.query = q.is_string()   ? q.get<std::string>()
                  : q.is_object() ? q.value("query", "")
                                  : std::string();
      std::smatch m;
      if (std::regex_match(var.query, m, label_values)) {
        var.selector = m[1];
        var.label = m[2];
      }
      var.include_all = v.value("includeAll", false);
      var.all_value = v.value("allValue", "");
      out.push_back(var);
    }
  }
  return out;
}

std::vector<std::string> RuleFiles() {
  const fs::path dir = fs::path(DeployDir()) / "prometheus";
  const YAML::Node config = YAML::LoadFile((dir / "prometheus.yml").string());
  std::vector<std::string> files;
  for (const auto& f : config["rule_files"]) files.push_back((dir / f.as<std::string>()).string());
  return files;
}

std::vector<PromExpr> RuleExprs() {
  std::vector<PromExpr> out;
  for (const std::string& path : RuleFiles()) {
    const YAML::Node file = YAML::LoadFile(path);
    for (const auto& group : file["groups"]) {
      for (const auto& rule : group["rules"]) {
        PromExpr e;
        e.expr = rule["expr"].as<std::string>();
        if (rule["alert"]) {
          e.alert = true;
          e.where = fs::path(path).filename().string() + ": " + rule["alert"].as<std::string>();
        } else {
          e.record = rule["record"].as<std::string>();
          e.where = fs::path(path).filename().string() + ": " + e.record;
        }
        out.push_back(e);
      }
    }
  }
  return out;
}

std::string ProvisionedDatasourceUid() {
  std::string uid;
  for (const auto& e : fs::directory_iterator(DeployDir() + "/grafana/provisioning/datasources")) {
    const YAML::Node file = YAML::LoadFile(e.path().string());
    for (const auto& ds : file["datasources"]) {
      if (ds["type"].as<std::string>() == "prometheus") uid = ds["uid"].as<std::string>();
    }
  }
  return uid;
}

std::set<std::string> MetricNames(const std::string& expr) {
  static const std::set<std::string> kNotNames = {
      // aggregation operators (may be followed by by/without before their parenthesis)
      "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk",
      "topk", "quantile",
      // keywords and literals
      "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
      "offset", "bool", "atan2", "inf", "nan"};
  static const std::set<std::string> kLabelLists = {"by",       "without",    "on",
                                                    "ignoring", "group_left", "group_right"};
  std::set<std::string> names;
  const std::string& s = expr;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      for (++i; i < s.size() && s[i] != c; ++i) {
        if (s[i] == '\\' && c != '`') ++i;
      }
      ++i;
    } else if (c == '{') {
      i = SkipBracket(s, i, '{', '}');
    } else if (c == '[') {
      i = SkipBracket(s, i, '[', ']');
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '$') {  // a dashboard variable
      ++i;
      if (i < s.size() && s[i] == '{') i = SkipBracket(s, i, '{', '}');
      while (i < s.size() && IsIdent(s[i])) ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      while (i < s.size() && (IsIdent(s[i]) || s[i] == '.')) ++i;  // number or duration
    } else if (IsIdentStart(c)) {
      const size_t start = i;
      while (i < s.size() && IsIdent(s[i])) ++i;
      std::string word = s.substr(start, i - start);
      std::string lower = word;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      const size_t next = SkipSpace(s, i);
      if (kLabelLists.count(lower)) {
        if (next < s.size() && s[next] == '(') i = SkipBracket(s, next, '(', ')');
      } else if (!kNotNames.count(lower) && !(next < s.size() && s[next] == '(')) {
        names.insert(word);
      }
    } else {
      ++i;
    }
  }
  return names;
}

std::set<std::string> VariablesUsed(const std::string& expr) {
  static const std::regex var(R"(\$\{?([A-Za-z_]\w*)\}?)");
  std::set<std::string> out;
  for (std::sregex_iterator it(expr.begin(), expr.end(), var), end; it != end; ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

std::string Substitute(const std::string& expr, const std::map<std::string, std::string>& values) {
  std::map<std::string, std::string> all = {
      {"__rate_interval", "1m"}, {"__interval", "15s"}, {"__range", "1h"}};
  for (const auto& [k, v] : values) all[k] = v;
  std::string out = expr;
  // Longest names first, so $job_id is not taken for a prefix of a longer name.
  std::vector<std::string> names;
  for (const auto& [k, v] : all) names.push_back(k);
  std::sort(names.begin(), names.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& name : names) {
    for (const std::string& token : {"${" + name + "}", "$" + name}) {
      for (size_t p = out.find(token); p != std::string::npos; p = out.find(token, p)) {
        out.replace(p, token.size(), all[name]);
        p += all[name].size();
      }
    }
  }
  return out;
}

}  // namespace adctl::testing
