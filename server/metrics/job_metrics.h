// adctld's Prometheus metrics (README.md "Metrics" lists them), on prometheus-cpp's registry:
// job counts by state, per-job training progress, per-rank data wait, checkpoints and restarts.
// The plain series of a step's values come from kPrometheusSeries (common/metric_values.h), one
// family per row; the others are built here by hand.
// Label `job_id`, never `job` (Prometheus owns it). Series of a finished job are dropped
// `retain_seconds` after it ended, so /metrics does not grow without bound. adctld serves the
// text format from its own HTTP server (server/http), so prometheus-cpp's civetweb exposer is
// not used. Thread-safe.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/metric_values.h"
#include "server/supervisor/supervisor.h"

namespace adctl {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// start, start·factor, … (`count` upper bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class JobMetrics : public SupervisorObserver {
 public:
  JobMetrics(Store* store, double retain_seconds = 300);

  void OnMetrics(const std::vector<MetricRecord>& points) override;
  void OnCheckpoint(const CheckpointRecord& checkpoint) override;
  void OnRestart(const std::string& job_id) override;
  void OnJobFinished(const std::string& job_id, JobState state) override;

  // The devices of this node for the per-node series (adctl_gpu_*) and the identity of each
  // rank's device (adctl_rank_gpu_info): `inventory` as adctld found it, `live` a fresh sample
  // with the holder of each device (AttemptMonitor::Devices), called by Scrape.
  void AttachDevices(std::vector<Device> inventory,
                     std::function<std::vector<DeviceStatus>()> live);

  // Refreshes the gauges read from the store and the devices, drops expired series, returns the
  // text format.
  std::string Scrape();
  prometheus::Registry& registry() { return *registry_; }
  // Series that carry this job's id now (for tests).
  size_t SeriesOf(const std::string& job_id);

 private:
  // A family of kPrometheusSeries: the row and its gauge, or its counter (kRankCounter).
  struct ListedFamily {
    const PrometheusSeries* row;
    prometheus::Family<prometheus::Gauge>* gauge;
    prometheus::Family<prometheus::Counter>* counter;
  };
  // Registers one family per row of kPrometheusSeries, in its order.
  static std::vector<ListedFamily> RegisterListed(prometheus::Registry& registry);

  // Applies `update` to the series of `family` with `labels` (created on first use, with
  // `args`), a series of job `job_id` that DropJob removes.
  template <typename T, typename Update, typename... Args>
  void WithSeries(prometheus::Family<T>& family, const std::string& job_id,
                  const prometheus::Labels& labels, const Update& update, Args&&... args);
  void DropJob(const std::string& job_id);  // requires mu_
  // The device names of an attempt's ranks (from the store, cached); requires mu_.
  const std::vector<std::string>& RankDevices(const std::string& job_id, int attempt);
  // Whether the job trains (not a preprocess job), from its spec, cached.
  bool Trains(const std::string& job_id);
  void UpdateRankDevice(const MetricRecord& m);
  // Creates job `j`'s counters (restarts; a training job's kRankCounter series per rank and its
  // step-time histogram) at 0 where they do not exist yet.
  void AddCountersAtZero(const JobRecord& j);
  // Removes a job's series of `family` with `labels` and forgets its remover; requires mu_.
  void RemoveSeries(prometheus::Family<prometheus::Gauge>& family, const std::string& job_id,
                    const prometheus::Labels& labels);
  void UpdateNodeDevices(const std::vector<DeviceStatus>& devices);

  // Constant after construction.
  Store* const store_;
  const double retain_seconds_;
  const std::vector<double> step_buckets_;
  const std::shared_ptr<prometheus::Registry> registry_;

  prometheus::Family<prometheus::Gauge>& jobs_;
  const std::vector<ListedFamily> listed_;  // one per row of kPrometheusSeries
  prometheus::Family<prometheus::Gauge>& eval_loss_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Gauge>& videos_skipped_;
  prometheus::Family<prometheus::Gauge>& shards_written_;
  prometheus::Family<prometheus::Gauge>& shards_;
  prometheus::Family<prometheus::Gauge>& clips_written_;
  prometheus::Family<prometheus::Gauge>& videos_per_second_;
  prometheus::Family<prometheus::Gauge>& checkpoint_last_success_;
  prometheus::Family<prometheus::Gauge>& checkpoint_size_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Gauge>& job_info_;
  prometheus::Family<prometheus::Gauge>& rank_gpu_info_;
  prometheus::Family<prometheus::Gauge>& gpu_info_;
  // One family per DeviceReading number (kReadingFields in the .cc), per rank and per node.
  std::vector<prometheus::Family<prometheus::Gauge>*> rank_gpu_;
  std::vector<prometheus::Family<prometheus::Gauge>*> gpu_;

  std::mutex mu_;
  std::map<std::string, double> finished_at_;  // guarded by mu_; job id → end time
  // guarded by mu_; job id → each of its series and how to remove it
  std::map<std::string, std::vector<std::pair<const void*, std::function<void()>>>> removers_;
  std::vector<Device> inventory_;                                                 // guarded by mu_
  std::function<std::vector<DeviceStatus>()> live_;                               // guarded by mu_
  std::map<std::pair<std::string, int>, std::vector<std::string>> rank_devices_;  // mu_
  std::map<std::string, bool> trains_;  // guarded by mu_; job id → not a preprocess job
  // guarded by mu_; (job id, rank) → its last reported device reading (CPU slots' values)
  std::map<std::pair<std::string, int>, DeviceReading> last_reading_;
  // guarded by mu_; (job id, rank) → the labels of its adctl_rank_gpu_info series (the device a
  // restart may change)
  std::map<std::pair<std::string, int>, prometheus::Labels> rank_device_labels_;
  std::vector<std::function<void()>> node_removers_;  // guarded by mu_; this scrape's adctl_gpu_*
};

}  // namespace adctl
