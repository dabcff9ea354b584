// adctld's Prometheus metrics (README.md "Metrics" lists them): job counts by state,
// per-job training progress, per-rank data wait, checkpoints and restarts. Label `job_id`,
// never `job` (Prometheus owns it). Series of a finished job are dropped `retain_seconds` after
// it ended, so /metrics does not grow without bound. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "common/prometheus.h"
#include "server/supervisor/supervisor.h"

namespace adctl {

class JobMetrics : public SupervisorObserver {
 public:
  JobMetrics(Store* store, double retain_seconds = 300);

  void OnMetrics(const std::vector<MetricRecord>& points) override;
  void OnCheckpoint(const CheckpointRecord& checkpoint) override;
  void OnRestart(const std::string& job_id) override;
  void OnJobFinished(const std::string& job_id, JobState state) override;

  // Refreshes the gauges read from the store, drops expired series, returns the text format.
  std::string Scrape();
  prom::Registry& registry() { return registry_; }

 private:
  // Constant after construction.
  Store* const store_;
  const double retain_seconds_;

  prom::Registry registry_;
  prom::MetricFamily& jobs_;
  prom::MetricFamily& loss_;
  prom::MetricFamily& global_step_;
  prom::MetricFamily& total_steps_;
  prom::MetricFamily& clips_per_second_;
  prom::MetricFamily& step_duration_;
  prom::MetricFamily& data_wait_;
  prom::MetricFamily& allreduce_exposed_;
  prom::MetricFamily& peak_memory_;
  prom::MetricFamily& checkpoint_last_success_;
  prom::MetricFamily& checkpoint_size_;
  prom::MetricFamily& restarts_;
  prom::MetricFamily& job_info_;

  std::mutex mu_;
  std::map<std::string, double> finished_at_;  // guarded by mu_; job id → end time
};

}  // namespace adctl
