#include "common/prometheus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace adctl::prom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(PrometheusTest, ExactTextForASmallRegistry) {
  Registry registry;
  MetricFamily& requests = registry.Counter("adctl_test_requests_total",
                                            "Requests handled.\nSecond \\ line.", {"job_id"});
  requests.Inc({"a\"b\\c\nd"}, 2);
  MetricFamily& step =
      registry.Histogram("adctl_test_step_seconds", "Step time.", {0.5, 1}, {"job_id", "rank"});
  step.Observe({"j1", "0"}, 0.25);
  step.Observe({"j1", "0"}, 1);  // upper bounds are inclusive
  step.Observe({"j1", "0"}, 3);
  registry.Gauge("adctl_test_up", "Whether it is up.").Set({}, 1);

  EXPECT_EQ(registry.Serialize(),
            "# HELP adctl_test_requests_total Requests handled.\\nSecond \\\\ line.\n"
            "# TYPE adctl_test_requests_total counter\n"
            "adctl_test_requests_total{job_id=\"a\\\"b\\\\c\\nd\"} 2\n"
            "# HELP adctl_test_step_seconds Step time.\n"
            "# TYPE adctl_test_step_seconds histogram\n"
            "adctl_test_step_seconds_bucket{job_id=\"j1\",rank=\"0\",le=\"0.5\"} 1\n"
            "adctl_test_step_seconds_bucket{job_id=\"j1\",rank=\"0\",le=\"1\"} 2\n"
            "adctl_test_step_seconds_bucket{job_id=\"j1\",rank=\"0\",le=\"+Inf\"} 3\n"
            "adctl_test_step_seconds_sum{job_id=\"j1\",rank=\"0\"} 4.25\n"
            "adctl_test_step_seconds_count{job_id=\"j1\",rank=\"0\"} 3\n"
            "# HELP adctl_test_up Whether it is up.\n"
            "# TYPE adctl_test_up gauge\n"
            "adctl_test_up 1\n");
}

TEST(PrometheusTest, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(42), "42");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e-9), "1e-09");
  EXPECT_EQ(FormatValue(12345678901234.0), "12345678901234");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_EQ(std::stod(FormatValue(1.0 / 3)), 1.0 / 3);
}

TEST(PrometheusTest, GaugeCounterSemanticsAndRemoval) {
  Registry registry;
  MetricFamily& loss = registry.Gauge("adctl_train_loss", "Loss.", {"job_id", "rank"});
  loss.Set({"j1", "0"}, 0.5);
  loss.Inc({"j1", "0"}, -0.25);
  loss.Set({"j1", "1"}, 0.7);
  loss.Set({"j2", "0"}, 0.9);
  EXPECT_DOUBLE_EQ(loss.Value({"j1", "0"}), 0.25);
  MetricFamily& steps = registry.Counter("adctl_train_steps_total", "Steps.", {"job_id"});
  steps.Inc({"j1"});
  steps.Inc({"j2"});
  MetricFamily& up = registry.Gauge("adctl_up", "Up.");  // no job_id label: untouched

  EXPECT_EQ(registry.RemoveSeries("job_id", "j1"), 3u);
  EXPECT_EQ(loss.SeriesCount(), 1u);
  EXPECT_EQ(steps.SeriesCount(), 1u);
  EXPECT_EQ(up.SeriesCount(), 1u);
  EXPECT_THAT(registry.Serialize(), Not(HasSubstr("j1")));
  EXPECT_TRUE(loss.Remove({"j2", "0"}));
  EXPECT_FALSE(loss.Remove({"j2", "0"}));
  // The family still prints its HELP/TYPE with no samples.
  EXPECT_THAT(registry.Serialize(), HasSubstr("# TYPE adctl_train_loss gauge\n# HELP"));
}

TEST(PrometheusTest, MisuseThrows) {
  Registry registry;
  EXPECT_THROW(registry.Counter("0bad", "x"), std::invalid_argument);
  EXPECT_THROW(registry.Counter("adctl_x_total", "x", {"__reserved"}), std::invalid_argument);
  EXPECT_THROW(registry.Counter("adctl_x_total", "x", {"a", "a"}), std::invalid_argument);
  EXPECT_THROW(registry.Histogram("adctl_h_seconds", "x", {1, 1}), std::invalid_argument);
  EXPECT_THROW(registry.Histogram("adctl_h_seconds", "x", {1}, {"le"}), std::invalid_argument);
  MetricFamily& c = registry.Counter("adctl_c_total", "x", {"job_id"});
  EXPECT_EQ(&registry.Counter("adctl_c_total", "x", {"job_id"}), &c);
  EXPECT_THROW(registry.Gauge("adctl_c_total", "x", {"job_id"}), std::invalid_argument);
  EXPECT_THROW(c.Inc({"a", "b"}), std::invalid_argument);
  EXPECT_THROW(c.Inc({"a"}, -1), std::invalid_argument);
  EXPECT_THROW(c.Set({"a"}, 1), std::invalid_argument);
  EXPECT_THROW(c.Observe({"a"}, 1), std::invalid_argument);
}

TEST(PrometheusTest, ConcurrentUpdates) {
  Registry registry;
  MetricFamily& c = registry.Counter("adctl_events_total", "Events.", {"job_id"});
  MetricFamily& h = registry.Histogram("adctl_wait_seconds", "Wait.",
                                       ExponentialBuckets(0.001, 2, 10), {"job_id"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        c.Inc({"j" + std::to_string(i % 3)});
        h.Observe({"j"}, 0.001 * i);
        if (i % 100 == 0) registry.Serialize();
        if (t == 0 && i % 250 == 0) registry.RemoveSeries("job_id", "j2");
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_DOUBLE_EQ(c.Value({"j0"}), 4 * 334);
  EXPECT_THAT(registry.Serialize(), HasSubstr("adctl_wait_seconds_count{job_id=\"j\"} 4000\n"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PrometheusTest, PromtoolAcceptsEveryKind) {
  const std::string promtool = ADCTL_PROMTOOL;
  if (promtool.empty()) GTEST_SKIP() << "promtool not found at configure time";

  Registry registry;
  registry.Counter("adctl_train_steps_total", "Optimizer steps taken.", {"job_id", "rank"})
      .Inc({"job-1", "0"}, 12);
  registry.Counter("adctl_jobs_submitted_total", "Jobs submitted.").Inc({});
  registry.Gauge("adctl_gpu_memory_used_bytes", "GPU memory in use.", {"job_id", "rank", "gpu"})
      .Set({"job \"quoted\"\\ with\nnewline", "1", "GPU-0"}, 1.5e9);
  registry.Gauge("adctl_queue_length", "Jobs waiting.").Set({}, 3);
  MetricFamily& step =
      registry.Histogram("adctl_train_step_duration_seconds", "Time per optimizer step.",
                         ExponentialBuckets(0.01, 4, 6), {"job_id"});
  for (double v : {0.005, 0.02, 0.5, 1.0, 30.0, 1e6}) step.Observe({"job-1"}, v);
  registry.Histogram("adctl_empty_duration_seconds", "A histogram with no observations.", {1, 2},
                     {"job_id"});
  registry.Histogram("adctl_unlabelled_duration_seconds", "Label-less histogram.", {0.1})
      .Observe({}, 0.05);

  const std::string dir = ::testing::TempDir();
  const std::string metrics = dir + "/adctl_metrics_" + std::to_string(::getpid()) + ".prom";
  const std::string output = metrics + ".out";
  {
    std::ofstream out(metrics);
    out << registry.Serialize();
  }
  const std::string command =
      "'" + promtool + "' check metrics < '" + metrics + "' > '" + output + "' 2>&1";
  int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << command;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "promtool said:\n"
                                    << ReadFile(output) << "\nfor:\n"
                                    << ReadFile(metrics);
  std::remove(metrics.c_str());
  std::remove(output.c_str());
}

}  // namespace
}  // namespace adctl::prom
