// The measured values of one training (or preprocess) step, listed once.
//
// A rank fills a MetricValues per logged step (worker/report/reporter.h calls it StepReport),
// sends it as a v1::MetricPoint (proto/metric_point.h converts, field by field name), adctld
// stores it (server/store/store.h: MetricRecord is these values plus who sent them) and serves
// it back as the same proto. The store's columns (created at open for a value that has none
// yet), both conversions, the worker's `--metrics-out` lines, the test against the proto
// (tests/server/convert_test.cc) all come from ForEachMetricValue, and adctld's plain
// Prometheus series from kPrometheusSeries below.
//
// Adding a metric: its v1::MetricPoint field (proto/), a member and a ForEachMetricValue line
// below, a kPrometheusSeries row when it is a plain Prometheus series, and the worker measuring
// it; then where it is shown (the web page, README.md's "Metrics"). No store migration and no
// edit in server/ or its tests: the column is added at open, with the member's default.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/nvml.h"

namespace adctl {

struct MetricValues {
  int64_t step = 0;  // optimizer steps done, 1-based after the first step
  int64_t total_steps = 0;
  double time = 0;  // unix seconds when the step ended
  double loss = 0;  // mean over ranks (identical on every rank)
  double learning_rate = 0;
  double grad_norm = 0;
  double step_seconds = 0;               // wall time of this optimizer step on this rank
  double data_wait_seconds = 0;          // time spent waiting for the next batch
  double allreduce_exposed_seconds = 0;  // all-reduce time not overlapped with backward
  double clips_per_second = 0;           // global: clips of all ranks per second of this step
  int64_t samples_seen = 0;              // global clips consumed so far
  int64_t peak_memory_bytes = 0;         // device memory high-water mark (0 on CPU)
  double mfu_ratio = 0;  // model FLOPs utilisation of the rank's GPU; 0 unknown (CPU)
  // The rank's device (common/nvml.h, DeviceReading); negative: not measured.
  double gpu_utilization = -1;
  int64_t gpu_memory_used_bytes = -1;
  int64_t gpu_memory_total_bytes = -1;
  double gpu_power_watts = -1;
  double gpu_temperature_celsius = -1;
  double gpu_sm_clock_hertz = -1;
  // Preprocess ranks: videos skipped so far by this rank's shards (every attempt), by reason
  // (worker/video/video_error.h); 0 on training ranks.
  int64_t videos_skipped_missing = 0;
  int64_t videos_skipped_unreadable = 0;
  int64_t videos_skipped_zero_frames = 0;
  int64_t videos_skipped_truncated = 0;
  int64_t videos_skipped_too_short = 0;
  // Eval loss on held-out clips (the spec's `eval`) when this step evaluated; negative: not
  // evaluated at this step.
  double eval_loss = -1;
  // Its per-timestep means, (timestep, loss) in eval.timesteps' order: the one value outside
  // ForEachMetricValue (a list; proto/metric_point.cc and the store convert it by hand).
  std::vector<std::pair<int64_t, double>> eval_by_timestep;
  // The shape bucket of the step's batches (numbered as the start-up event lists them), -1 when
  // its micro-batches came from several; 0 for data of one shape.
  int64_t bucket = 0;
};

// Calls f(name, member) for every value above, under its v1::MetricPoint field name.
template <typename Values, typename F>
void ForEachMetricValue(Values& m, F&& f) {
  f("step", m.step);
  f("total_steps", m.total_steps);
  f("time", m.time);
  f("loss", m.loss);
  f("learning_rate", m.learning_rate);
  f("grad_norm", m.grad_norm);
  f("step_seconds", m.step_seconds);
  f("data_wait_seconds", m.data_wait_seconds);
  f("allreduce_exposed_seconds", m.allreduce_exposed_seconds);
  f("clips_per_second", m.clips_per_second);
  f("samples_seen", m.samples_seen);
  f("peak_memory_bytes", m.peak_memory_bytes);
  f("mfu_ratio", m.mfu_ratio);
  f("gpu_utilization", m.gpu_utilization);
  f("gpu_memory_used_bytes", m.gpu_memory_used_bytes);
  f("gpu_memory_total_bytes", m.gpu_memory_total_bytes);
  f("gpu_power_watts", m.gpu_power_watts);
  f("gpu_temperature_celsius", m.gpu_temperature_celsius);
  f("gpu_sm_clock_hertz", m.gpu_sm_clock_hertz);
  f("videos_skipped_missing", m.videos_skipped_missing);
  f("videos_skipped_unreadable", m.videos_skipped_unreadable);
  f("videos_skipped_zero_frames", m.videos_skipped_zero_frames);
  f("videos_skipped_truncated", m.videos_skipped_truncated);
  f("videos_skipped_too_short", m.videos_skipped_too_short);
  f("eval_loss", m.eval_loss);
  f("bucket", m.bucket);
}

// ForEachMetricValue as a callable (common/record_values.h's kCheckpointValues says why).
inline constexpr auto kMetricValues = [](auto& values, auto&& f) { ForEachMetricValue(values, f); };

// The value of `m` that ForEachMetricValue names `name`, as a double; nullopt for no such name.
inline std::optional<double> MetricValueByName(const MetricValues& m, std::string_view name) {
  std::optional<double> value;
  ForEachMetricValue(m, [&](std::string_view n, const auto& v) {
    if (n == name) value = static_cast<double>(v);
  });
  return value;
}

// How adctld exports a row of kPrometheusSeries from the points of a training job's ranks (a
// preprocess job has none of these series).
enum class SeriesKind {
  kJobGauge,     // set from rank 0's point; labels job_id
  kRankGauge,    // set from each rank's point; labels job_id, rank
  kRankCounter,  // incremented by each rank's value (a negative one adds 0); labels job_id, rank;
                 // exists at 0 for every rank of a training job from its first scrape on
};

// A value exported as a plain Prometheus series: one family, one series per job (or rank), its
// latest value (or their sum). server/metrics/job_metrics.cc builds one family per row of
// kPrometheusSeries; what is not plain (eval loss per timestep, the step-time histogram, the
// preprocess and device series) it builds by hand. README.md's "Metrics" lists them all.
struct PrometheusSeries {
  const char* value;   // its ForEachMetricValue (v1::MetricPoint) name
  const char* family;  // units in the name; a counter's ends in _total
  const char* help;
  SeriesKind kind;
  bool positive_only = false;  // a gauge's value <= 0 (unknown) is not exported
};

inline constexpr PrometheusSeries kPrometheusSeries[] = {
    {"loss", "adctl_train_loss", "Latest training loss (mean over ranks).", SeriesKind::kJobGauge},
    {"learning_rate", "adctl_train_learning_rate", "Learning rate of the latest optimizer step.",
     SeriesKind::kJobGauge},
    {"step", "adctl_train_global_step", "Optimizer steps done.", SeriesKind::kJobGauge},
    {"total_steps", "adctl_train_total_steps", "Optimizer steps the job runs.",
     SeriesKind::kJobGauge},
    {"clips_per_second", "adctl_train_clips_per_second",
     "Training throughput of all ranks, clips per second.", SeriesKind::kJobGauge},
    {"mfu_ratio", "adctl_train_mfu_ratio",
     "Model FLOPs utilisation of rank 0's GPU (training FLOPs per clip x clips/s per rank / "
     "dense bf16 peak); absent on CPU ranks.",
     SeriesKind::kJobGauge, /*positive_only=*/true},
    {"bucket", "adctl_train_shape_bucket_index",
     "Shape bucket of the latest step's batches (the job's start-up event lists them; -1: "
     "several in one step; 0: data of one shape).",
     SeriesKind::kJobGauge},
    {"peak_memory_bytes", "adctl_train_peak_memory_bytes",
     "Device memory high-water mark of a rank.", SeriesKind::kRankGauge, /*positive_only=*/true},
    {"data_wait_seconds", "adctl_train_data_wait_seconds_total",
     "Time a rank waited for its next batch.", SeriesKind::kRankCounter},
    {"allreduce_exposed_seconds", "adctl_train_allreduce_exposed_seconds_total",
     "All-reduce time not hidden behind backward.", SeriesKind::kRankCounter},
};
// A counter exists at 0 from the start and adds only what is positive: positive_only is a
// gauge's.
static_assert(
    [] {
      for (const PrometheusSeries& row : kPrometheusSeries) {
        if (row.kind == SeriesKind::kRankCounter && row.positive_only) return false;
      }
      return true;
    }(),
    "a kRankCounter row is not positive_only");

// The skip counts of `m` under their reason names ("missing", ..., as VideoErrorName spells
// them), for the Prometheus series and the CLI.
template <typename Values, typename F>
void ForEachVideoSkipCount(Values& m, F&& f) {
  f("missing", m.videos_skipped_missing);
  f("unreadable", m.videos_skipped_unreadable);
  f("zero_frames", m.videos_skipped_zero_frames);
  f("truncated", m.videos_skipped_truncated);
  f("too_short", m.videos_skipped_too_short);
}

// The device fields of `m`, to and from the sampler's reading.
inline void SetDeviceValues(const DeviceReading& r, MetricValues* m) {
  m->gpu_utilization = r.utilization;
  m->gpu_memory_used_bytes = r.memory_used_bytes;
  m->gpu_memory_total_bytes = r.memory_total_bytes;
  m->gpu_power_watts = r.power_watts;
  m->gpu_temperature_celsius = r.temperature_celsius;
  m->gpu_sm_clock_hertz = r.sm_clock_hertz;
}
inline DeviceReading DeviceValuesOf(const MetricValues& m) {
  DeviceReading r;
  r.utilization = m.gpu_utilization;
  r.memory_used_bytes = m.gpu_memory_used_bytes;
  r.memory_total_bytes = m.gpu_memory_total_bytes;
  r.power_watts = m.gpu_power_watts;
  r.temperature_celsius = m.gpu_temperature_celsius;
  r.sm_clock_hertz = m.gpu_sm_clock_hertz;
  return r;
}

}  // namespace adctl
