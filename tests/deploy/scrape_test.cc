// A real scrape: Debian's prometheus (loopback, a free port, temporary storage, 1 s scrape and
// rule evaluation, the config generated from deploy/prometheus/prometheus.yml with the target
// rewritten) scrapes a real adctld whose CPU training job runs the real adworker (tiny model,
// synthetic data, a checkpoint every 2 steps, one rank killed so the job restarts once). Then
// every PromQL expression of the dashboards and the rule files — read from those files — is
// sent to /api/v1/query with the dashboard variables filled in, and must return data for the
// job; alerts must be quiet; expressions over GPU-only families may be empty on CPU, and over
// preprocess families for this training job.
//
// Fails when prometheus is missing (scripts/install-deps installs it); skips only when no adworker
// is available (a control-plane-only build without ADCTL_PREBUILT_ADWORKER).
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/deploy/deploy_files.h"
#include "tests/integration/harness.h"
#include "tests/testing/free_port.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Which(const std::string& name) {
  if (name.find('/') != std::string::npos) return fs::exists(name) ? name : "";
  const char* path = getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

// deploy/prometheus/prometheus.yml with 1 s intervals, absolute rule files and adctld at `target`.
std::string PrometheusConfig(const std::string& target) {
  YAML::Node config = YAML::LoadFile(DeployDir() + "/prometheus/prometheus.yml");
  config["global"]["scrape_interval"] = "1s";
  config["global"]["scrape_timeout"] = "1s";
  config["global"]["evaluation_interval"] = "1s";
  YAML::Node rules(YAML::NodeType::Sequence);
  for (const std::string& f : RuleFiles()) rules.push_back(f);
  config["rule_files"] = rules;
  int rewritten = 0;
  for (auto sc : config["scrape_configs"]) {
    if (sc["job_name"].as<std::string>() != "adctld") continue;
    YAML::Node targets(YAML::NodeType::Sequence);
    targets.push_back(target);
    YAML::Node static_config;
    static_config["targets"] = targets;
    YAML::Node list(YAML::NodeType::Sequence);
    list.push_back(static_config);
    sc["static_configs"] = list;
    ++rewritten;
  }
  EXPECT_EQ(rewritten, 1) << "prometheus.yml has no scrape config with job_name adctld";
  YAML::Emitter out;
  out << config;
  return out.c_str();
}

// Debian's prometheus on loopback with its own storage; stopped by the destructor.
class Prometheus {
 public:
  Prometheus(const std::string& binary, const std::string& dir, const std::string& config)
      : dir_(dir), port_(FreePort()) {
    std::ofstream(dir_ + "/prometheus.yml") << config;
    pid_ = fork();
    if (pid_ == 0) {
      const std::string log = dir_ + "/prometheus.log";
      FILE* f = freopen(log.c_str(), "a", stderr);
      (void)f;
      dup2(2, 1);
      const std::string config_flag = "--config.file=" + dir_ + "/prometheus.yml";
      const std::string storage = "--storage.tsdb.path=" + dir_ + "/data";
      const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port_);
      execl(binary.c_str(), "prometheus", config_flag.c_str(), storage.c_str(), listen.c_str(),
            "--log.level=warn", "--storage.tsdb.retention.time=1h", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Prometheus() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  // Waits for /-/ready; false (with the log) when prometheus exited or never got ready.
  bool WaitReady(double seconds) {
    httplib::Client client("127.0.0.1", port_);
    for (int i = 0; i < seconds * 10; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = 0;
        return false;
      }
      auto res = client.Get("/-/ready");
      if (res && res->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // /api/v1/query; the parsed answer, or {"error": ...}.
  json Query(const std::string& expr) const {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(10, 0);
    auto res = client.Post("/api/v1/query", httplib::Params{{"query", expr}});
    if (!res) return {{"status", "error"}, {"error", "no answer from prometheus"}};
    auto j = json::parse(res->body, nullptr, false);
    if (j.is_discarded()) return {{"status", "error"}, {"error", res->body}};
    return j;
  }
  std::string Log() const { return ReadFile(dir_ + "/prometheus.log"); }

 private:
  std::string dir_;
  int port_;
  pid_t pid_ = 0;
};

// What an expression must return for the running job.
enum class Expect { kData, kEmpty, kMaybeEmpty };

struct Check {
  std::string where;
  std::string query;  // variables substituted
  Expect expect;
  std::string label;  // label_values(): the label the series must have (job_id: with the job's id)
};

// "" when `answer` is what `check` asks for; the reason otherwise.
std::string Verdict(const Check& check, const json& answer, const std::string& job) {
  if (answer.value("status", "") != "success") return "query failed: " + answer.dump();
  const json& data = answer["data"];
  const std::string type = data.value("resultType", "");
  if (type == "scalar") return check.expect == Expect::kEmpty ? "a scalar for an alert" : "";
  const json& result = data["result"];
  if (check.expect == Expect::kEmpty) {
    return result.empty() ? "" : "the alert's condition holds: " + result.dump();
  }
  if (result.empty()) return check.expect == Expect::kMaybeEmpty ? "" : "no data";
  // Series that carry a job_id must include this job's.
  bool any_job_label = false, this_job = false;
  for (const json& series : result) {
    const json& metric = series["metric"];
    if (!metric.contains("job_id")) continue;
    any_job_label = true;
    if (metric["job_id"] == job) this_job = true;
  }
  if (!check.label.empty()) {
    bool labelled = false;
    for (const json& series : result) labelled |= series["metric"].contains(check.label);
    if (!labelled) return "no series has label " + check.label;
    if (check.label == "job_id" && !this_job) return "no series with job_id " + job;
  }
  if (any_job_label && !this_job) return "no series of job " + job + ": " + result.dump();
  return "";
}

class ScrapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prometheus_ = Which(ADCTL_PROMETHEUS);
    ASSERT_FALSE(prometheus_.empty())
        << ADCTL_PROMETHEUS << " not found: install Debian's prometheus (scripts/install-deps)";
    if (!HaveAdworker()) {
      GTEST_SKIP() << "adworker is not built (configure with ADCTL_PREBUILT_ADWORKER)";
    }
  }
  std::string prometheus_;
};

TEST_F(ScrapeTest, EveryDashboardAndRuleExpressionReturnsDataForARealCpuJob) {
  Coordinator c(2);
  c.Start();
  // One rank: the tiny preset on synthetic clips, a checkpoint every 2 steps, one restart allowed.
  const std::string spec =
      c.WriteSpec("scrape",
                  "name: scrape\n"
                  "model: {preset: tiny}\n"
                  "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
                  "train: {max_steps: 100000, batch_size: 1}\n"
                  "checkpoint: {every_steps: 2, keep_last: 2}\n"
                  "resources: {gpus: 1, max_restarts: 1, grace_seconds: 10}\n");
  const std::string job = c.Submit(spec);

  Prometheus prom(prometheus_, c.dir(), PrometheusConfig(c.http_address()));
  ASSERT_TRUE(prom.WaitReady(60)) << "prometheus did not start:\n" << prom.Log();

  // A checkpoint, then a killed rank: attempt 2 resumes from it, so adctl_job_restarts_total
  // exists too.
  const auto step = [](const json& j) {
    return j.contains("progress") ? std::stoll(j["progress"].value("step", "0")) : 0;
  };
  auto first = c.WaitUntil(
      job,
      [](const json& j) {
        return j.contains("progress") &&
               std::stoll(j["progress"].value("last_checkpoint_step", "0")) >= 2 &&
               !j["ranks"].empty() && j["ranks"][0].value("pid", 0) > 0;
      },
      240, "a checkpoint in attempt 1");
  ASSERT_FALSE(first["ranks"].empty()) << first.dump(2);
  // Let Prometheus see attempt 1's series over a few scrapes before the restart.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  kill(first["ranks"][0]["pid"].get<int>(), SIGKILL);
  const auto second = c.WaitUntil(
      job,
      [&](const json& j) {
        return j.value("attempt", 0) == 2 && j.value("state", "") == "JOB_STATE_RUNNING" &&
               step(j) > step(first);
      },
      240, "attempt 2 past attempt 1's step");
  ASSERT_EQ(second.value("attempt", 0), 2) << second.dump(2);

  // Every expression, with the variables filled in.
  std::map<std::string, std::string> values = {{"job_id", job}};
  std::vector<Check> checks;
  for (const DashboardVariable& v : DashboardVariables()) {
    if (v.name != "job_id") values[v.name] = v.include_all ? v.all_value : "0";
  }
  // Recording rules over GPU-only families are GPU-only too; preprocess families are empty
  // for a training job the same way.
  std::set<std::string> gpu_only = GpuOnlyFamilies();
  gpu_only.insert(PreprocessOnlyFamilies().begin(), PreprocessOnlyFamilies().end());
  for (const PromExpr& e : RuleExprs()) {
    for (const std::string& n : MetricNames(e.expr)) {
      if (!e.record.empty() && gpu_only.count(n)) gpu_only.insert(e.record);
    }
  }
  const auto add = [&](const PromExpr& e) {
    Check check{e.where, Substitute(e.expr, values), Expect::kData, ""};
    for (const std::string& n : MetricNames(e.expr)) {
      if (gpu_only.count(n)) check.expect = Expect::kMaybeEmpty;
    }
    if (e.alert) check.expect = Expect::kEmpty;
    EXPECT_EQ(check.query.find('$'), std::string::npos) << e.where << ": " << check.query;
    checks.push_back(check);
  };
  for (const PromExpr& e : DashboardExprs()) add(e);
  for (const PromExpr& e : RuleExprs()) add(e);
  for (const DashboardVariable& v : DashboardVariables()) {
    checks.push_back({v.dashboard + ": $" + v.name + " = " + v.query,
                      Substitute(v.selector, values), Expect::kData, v.label});
  }
  ASSERT_GT(checks.size(), 40u);

  // Until all hold (rules need a few evaluations, rates two scrapes), at most 90 s.
  std::map<std::string, std::string> failures;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  do {
    failures.clear();
    for (const Check& check : checks) {
      const std::string why = Verdict(check, prom.Query(check.query), job);
      if (!why.empty()) failures[check.where + "\n    " + check.query] = why;
    }
    if (failures.empty()) break;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  } while (std::chrono::steady_clock::now() < deadline);
  for (const auto& [what, why] : failures) ADD_FAILURE() << what << "\n    -> " << why;
  int data = 0, quiet = 0, empty = 0;
  for (const Check& check : checks) {
    const json answer = prom.Query(check.query);
    const bool has =
        answer.contains("data") &&
        (answer["data"].value("resultType", "") == "scalar" || !answer["data"]["result"].empty());
    if (check.expect == Expect::kEmpty) {
      ++quiet;
    } else if (has) {
      ++data;
    } else {
      ++empty;
      std::cout << "empty (a GPU- or preprocess-only family): " << check.where << "\n";
    }
  }
  std::cout << checks.size() << " expressions checked against job " << job << ": " << data
            << " with data, " << quiet << " alerts quiet, " << empty
            << " GPU- or preprocess-only empty\n";
  if (!failures.empty()) std::cout << "prometheus log:\n" << prom.Log();
  EXPECT_EQ(c.Adctl({"cancel", job, "--force"}).exit_code, 0);
}

}  // namespace
}  // namespace adctl::testing
