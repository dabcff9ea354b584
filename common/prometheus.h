// A small Prometheus registry with the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/). prometheus-cpp is not
// packaged for Debian 12, and adctld needs only counters, gauges and histograms with labels.
//
// A Registry owns metric families; a family has a name, help text, type and fixed label names,
// and holds one series per distinct tuple of label values. Series are created on first use;
// a family without labels has its single series from the start (value 0).
//
//   Registry registry;
//   MetricFamily& steps = registry.Counter("adctl_train_steps_total", "Optimizer steps.",
//                                          {"job_id"});
//   steps.Inc({"j-42"});
//   registry.RemoveSeries("job_id", "j-42");   // drop a finished job's series everywhere
//   std::string body = registry.Serialize();    // Content-Type: kPrometheusContentType
//
// Misuse by the programmer (invalid metric or label names, re-registering a name with another
// type/labels/buckets, wrong number of label values, Observe on a counter, a negative counter
// increment) throws std::invalid_argument: these are constant call sites, caught by tests.
//
// Thread-safety: everything is thread-safe (one mutex per family, one for the registry).
// References returned by Counter/Gauge/Histogram stay valid for the registry's lifetime.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace adctl::prom {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType { kCounter, kGauge, kHistogram };

class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, MetricType type,
               std::vector<std::string> label_names, std::vector<double> buckets);
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  const std::vector<double>& buckets() const { return buckets_; }

  // `label_values` are positional, one per label name.
  void Inc(const std::vector<std::string>& label_values, double amount = 1);  // counter, gauge
  void Set(const std::vector<std::string>& label_values, double value);       // gauge
  void Observe(const std::vector<std::string>& label_values, double value);   // histogram
  // Current value of a counter/gauge series (0 if it does not exist); for tests.
  double Value(const std::vector<std::string>& label_values) const;

  // Removes the series with exactly these label values; returns whether one existed.
  bool Remove(const std::vector<std::string>& label_values);
  // Removes every series whose label `label_name` equals `value`; returns how many. A family
  // without that label is untouched.
  size_t RemoveMatching(const std::string& label_name, const std::string& value);
  size_t SeriesCount() const;

  // Appends this family's HELP, TYPE and sample lines.
  void SerializeTo(std::string* out) const;

 private:
  struct Series {
    double value = 0;                   // counter, gauge
    std::vector<uint64_t> bucket_hits;  // histogram: per bucket (not cumulative), +Inf last
    double sum = 0;
    uint64_t count = 0;
  };
  Series& GetSeries(const std::vector<std::string>& label_values);  // requires mu_ held

  // Constant after construction.
  const std::string name_;
  const std::string help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> buckets_;  // histogram upper bounds, increasing, +Inf implicit

  mutable std::mutex mu_;
  std::map<std::vector<std::string>, Series> series_;  // guarded by mu_
};

class Registry {
 public:
  // Registers a family, or returns the existing one of that name if type, label names (and
  // buckets) agree. Counter names should end in "_total" (promtool's lint asks for it).
  MetricFamily& Counter(const std::string& name, const std::string& help,
                        const std::vector<std::string>& label_names = {});
  MetricFamily& Gauge(const std::string& name, const std::string& help,
                      const std::vector<std::string>& label_names = {});
  // `buckets`: finite, strictly increasing upper bounds; the +Inf bucket is added.
  MetricFamily& Histogram(const std::string& name, const std::string& help,
                          const std::vector<double>& buckets,
                          const std::vector<std::string>& label_names = {});

  // Removes, from every family that has label `label_name`, the series where it equals `value`.
  size_t RemoveSeries(const std::string& label_name, const std::string& value);

  // The whole registry in text format 0.0.4, families sorted by name.
  std::string Serialize() const;

 private:
  MetricFamily& Add(const std::string& name, const std::string& help, MetricType type,
                    const std::vector<std::string>& label_names,
                    const std::vector<double>& buckets);

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<MetricFamily>> families_;  // guarded by mu_
};

// Helpers, exposed for tests and for other exporters.
std::string EscapeLabelValue(const std::string& value);  // \ " newline
std::string EscapeHelp(const std::string& help);         // \ newline
std::string FormatValue(double value);                   // shortest round-trip; +Inf, -Inf, NaN
// exponential buckets: start, start*factor, ... (count of them)
std::vector<double> ExponentialBuckets(double start, double factor, int count);

}  // namespace adctl::prom
