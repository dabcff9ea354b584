// Prometheus text format 0.0.4 (see prometheus.h).
#include "common/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <stdexcept>

namespace adctl::prom {
namespace {

bool ValidMetricName(const std::string& n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool ValidLabelName(const std::string& n) {
  if (n.empty() || n.compare(0, 2, "__") == 0) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

const char* TypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

// `{a="x",b="y"}`, with an optional extra label (histogram `le`) last; "" if no labels at all.
std::string LabelBlock(const std::vector<std::string>& names,
                       const std::vector<std::string>& values, const char* extra_name = nullptr,
                       const std::string& extra_value = "") {
  if (names.empty() && extra_name == nullptr) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ",";
    out += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (extra_name != nullptr) {
    if (!names.empty()) out += ",";
    out += std::string(extra_name) + "=\"" + EscapeLabelValue(extra_value) + "\"";
  }
  return out + "}";
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (value == std::floor(value) &&
      std::fabs(value) < 1e15) {  // integers without an exponent: 60, not 6e+01
    std::snprintf(buf, sizeof(buf), "%.0f", value);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (start <= 0 || factor <= 1 || count < 1) {
    throw std::invalid_argument("ExponentialBuckets: need start > 0, factor > 1, count >= 1");
  }
  std::vector<double> buckets;
  for (int i = 0; i < count; ++i, start *= factor) buckets.push_back(start);
  return buckets;
}

// ---- MetricFamily ------------------------------------------------------------------------------

MetricFamily::MetricFamily(std::string name, std::string help, MetricType type,
                           std::vector<std::string> label_names, std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {
  if (!ValidMetricName(name_)) throw std::invalid_argument("invalid metric name '" + name_ + "'");
  std::set<std::string> seen;
  for (const std::string& l : label_names_) {
    if (!ValidLabelName(l)) {
      throw std::invalid_argument(name_ + ": invalid label name '" + l + "'");
    }
    if (type_ == MetricType::kHistogram && l == "le") {
      throw std::invalid_argument(name_ + ": a histogram cannot have a label 'le'");
    }
    if (!seen.insert(l).second)
      throw std::invalid_argument(name_ + ": duplicate label '" + l + "'");
  }
  if (type_ == MetricType::kHistogram) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      if (!std::isfinite(buckets_[i]) || (i > 0 && buckets_[i] <= buckets_[i - 1])) {
        throw std::invalid_argument(name_ + ": buckets must be finite and strictly increasing");
      }
    }
  } else if (!buckets_.empty()) {
    throw std::invalid_argument(name_ + ": only histograms have buckets");
  }
  if (label_names_.empty()) GetSeries({});  // a label-less metric exists from the start
}

MetricFamily::Series& MetricFamily::GetSeries(const std::vector<std::string>& label_values) {
  if (label_values.size() != label_names_.size()) {
    throw std::invalid_argument(name_ + ": expected " + std::to_string(label_names_.size()) +
                                " label values, got " + std::to_string(label_values.size()));
  }
  auto [it, inserted] = series_.try_emplace(label_values);
  if (inserted && type_ == MetricType::kHistogram) {
    it->second.bucket_hits.assign(buckets_.size() + 1, 0);
  }
  return it->second;
}

void MetricFamily::Inc(const std::vector<std::string>& label_values, double amount) {
  if (type_ == MetricType::kHistogram) throw std::invalid_argument(name_ + ": Inc on a histogram");
  if (type_ == MetricType::kCounter && !(amount >= 0)) {
    throw std::invalid_argument(name_ + ": a counter can only increase");
  }
  std::lock_guard<std::mutex> lock(mu_);
  GetSeries(label_values).value += amount;
}

void MetricFamily::Set(const std::vector<std::string>& label_values, double value) {
  if (type_ != MetricType::kGauge) throw std::invalid_argument(name_ + ": Set on a non-gauge");
  std::lock_guard<std::mutex> lock(mu_);
  GetSeries(label_values).value = value;
}

void MetricFamily::Observe(const std::vector<std::string>& label_values, double value) {
  if (type_ != MetricType::kHistogram) {
    throw std::invalid_argument(name_ + ": Observe on a non-histogram");
  }
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = GetSeries(label_values);
  // First bucket whose upper bound is >= value (bounds are inclusive); NaN goes to +Inf.
  size_t i = std::lower_bound(buckets_.begin(), buckets_.end(), value) - buckets_.begin();
  if (std::isnan(value)) i = buckets_.size();
  s.bucket_hits[i]++;
  s.sum += value;
  s.count++;
}

double MetricFamily::Value(const std::vector<std::string>& label_values) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(label_values);
  return it == series_.end() ? 0 : it->second.value;
}

bool MetricFamily::Remove(const std::vector<std::string>& label_values) {
  std::lock_guard<std::mutex> lock(mu_);
  return series_.erase(label_values) > 0;
}

size_t MetricFamily::RemoveMatching(const std::string& label_name, const std::string& value) {
  auto pos = std::find(label_names_.begin(), label_names_.end(), label_name);
  if (pos == label_names_.end()) return 0;
  const size_t index = pos - label_names_.begin();
  std::lock_guard<std::mutex> lock(mu_);
  size_t removed = 0;
  for (auto it = series_.begin(); it != series_.end();) {
    if (it->first[index] == value) {
      it = series_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return removed;
}

size_t MetricFamily::SeriesCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return series_.size();
}

void MetricFamily::SerializeTo(std::string* out) const {
  *out += "# HELP " + name_ + " " + EscapeHelp(help_) + "\n";
  *out += "# TYPE " + name_ + " " + TypeName(type_) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, s] : series_) {
    if (type_ != MetricType::kHistogram) {
      *out += name_ + LabelBlock(label_names_, values) + " " + FormatValue(s.value) + "\n";
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= buckets_.size(); ++i) {
      cumulative += s.bucket_hits[i];
      const std::string le = i < buckets_.size() ? FormatValue(buckets_[i]) : "+Inf";
      *out += name_ + "_bucket" + LabelBlock(label_names_, values, "le", le) + " " +
              std::to_string(cumulative) + "\n";
    }
    *out += name_ + "_sum" + LabelBlock(label_names_, values) + " " + FormatValue(s.sum) + "\n";
    *out +=
        name_ + "_count" + LabelBlock(label_names_, values) + " " + std::to_string(s.count) + "\n";
  }
}

// ---- Registry ----------------------------------------------------------------------------------

MetricFamily& Registry::Add(const std::string& name, const std::string& help, MetricType type,
                            const std::vector<std::string>& label_names,
                            const std::vector<double>& buckets) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    MetricFamily& existing = *it->second;
    if (existing.type() != type || existing.label_names() != label_names ||
        existing.buckets() != buckets) {
      throw std::invalid_argument("metric '" + name +
                                  "' already registered with another type, labels or buckets");
    }
    return existing;
  }
  auto family = std::make_unique<MetricFamily>(name, help, type, label_names, buckets);
  MetricFamily& ref = *family;
  families_.emplace(name, std::move(family));
  return ref;
}

MetricFamily& Registry::Counter(const std::string& name, const std::string& help,
                                const std::vector<std::string>& label_names) {
  return Add(name, help, MetricType::kCounter, label_names, {});
}

MetricFamily& Registry::Gauge(const std::string& name, const std::string& help,
                              const std::vector<std::string>& label_names) {
  return Add(name, help, MetricType::kGauge, label_names, {});
}

MetricFamily& Registry::Histogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& buckets,
                                  const std::vector<std::string>& label_names) {
  return Add(name, help, MetricType::kHistogram, label_names, buckets);
}

size_t Registry::RemoveSeries(const std::string& label_name, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t removed = 0;
  for (auto& [name, family] : families_) removed += family->RemoveMatching(label_name, value);
  return removed;
}

std::string Registry::Serialize() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, family] : families_) family->SerializeTo(&out);
  return out;
}

}  // namespace adctl::prom
