#include "server/metrics/job_metrics.h"

namespace adctl {

JobMetrics::JobMetrics(Store* store, double retain_seconds)
    : store_(store),
      retain_seconds_(retain_seconds),
      jobs_(registry_.Gauge("adctl_jobs", "Jobs known to adctld, by state.", {"state"})),
      loss_(registry_.Gauge("adctl_train_loss", "Latest training loss (mean over ranks).",
                            {"job_id"})),
      global_step_(registry_.Gauge("adctl_train_global_step", "Optimizer steps done.", {"job_id"})),
      total_steps_(
          registry_.Gauge("adctl_train_total_steps", "Optimizer steps the job runs.", {"job_id"})),
      clips_per_second_(registry_.Gauge("adctl_train_clips_per_second",
                                        "Training throughput of all ranks, clips per second.",
                                        {"job_id"})),
      step_duration_(registry_.Histogram("adctl_train_step_duration_seconds",
                                         "Wall time of one optimizer step (rank 0).",
                                         prom::ExponentialBuckets(0.01, 2, 14), {"job_id"})),
      data_wait_(registry_.Counter("adctl_train_data_wait_seconds_total",
                                   "Time a rank waited for its next batch.", {"job_id", "rank"})),
      allreduce_exposed_(registry_.Counter("adctl_train_allreduce_exposed_seconds_total",
                                           "All-reduce time not hidden behind backward.",
                                           {"job_id", "rank"})),
      peak_memory_(registry_.Gauge("adctl_train_peak_memory_bytes",
                                   "Device memory high-water mark of a rank.", {"job_id", "rank"})),
      checkpoint_last_success_(registry_.Gauge("adctl_checkpoint_last_success_timestamp_seconds",
                                               "Unix time of the newest committed checkpoint.",
                                               {"job_id"})),
      checkpoint_size_(registry_.Gauge("adctl_checkpoint_size_bytes",
                                       "Size of the newest committed checkpoint.", {"job_id"})),
      restarts_(registry_.Counter("adctl_job_restarts_total",
                                  "Attempts started by the restart policy.", {"job_id"})),
      job_info_(registry_.Gauge("adctl_job_info", "Job metadata; value 1.", {"job_id", "name"})) {}

void JobMetrics::OnMetrics(const std::vector<MetricRecord>& points) {
  for (const MetricRecord& m : points) {
    const std::string rank = std::to_string(m.rank);
    data_wait_.Inc({m.job_id, rank}, std::max(0.0, m.data_wait_seconds));
    allreduce_exposed_.Inc({m.job_id, rank}, std::max(0.0, m.allreduce_exposed_seconds));
    if (m.peak_memory_bytes > 0) {
      peak_memory_.Set({m.job_id, rank}, static_cast<double>(m.peak_memory_bytes));
    }
    if (m.rank != 0) continue;
    loss_.Set({m.job_id}, m.loss);
    global_step_.Set({m.job_id}, static_cast<double>(m.step));
    total_steps_.Set({m.job_id}, static_cast<double>(m.total_steps));
    clips_per_second_.Set({m.job_id}, m.clips_per_second);
    if (m.step_seconds > 0) step_duration_.Observe({m.job_id}, m.step_seconds);
  }
}

void JobMetrics::OnCheckpoint(const CheckpointRecord& c) {
  checkpoint_last_success_.Set({c.job_id}, c.created_at > 0 ? c.created_at : NowSeconds());
  checkpoint_size_.Set({c.job_id}, static_cast<double>(c.size_bytes));
}

void JobMetrics::OnRestart(const std::string& job_id) { restarts_.Inc({job_id}); }

void JobMetrics::OnJobFinished(const std::string& job_id, JobState /*state*/) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_at_[job_id] = NowSeconds();
}

std::string JobMetrics::Scrape() {
  if (auto counts = store_->CountJobsByState(); counts.ok()) {
    for (JobState s : kAllJobStates) jobs_.Set({JobStateName(s)}, 0);
    for (const auto& [state, n] : counts.value()) {
      jobs_.Set({JobStateName(state)}, static_cast<double>(n));
    }
  }
  if (auto active = store_->ListActiveJobs(); active.ok()) {
    for (const JobRecord& j : active.value()) job_info_.Set({j.id, j.name}, 1);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = NowSeconds();
    for (auto it = finished_at_.begin(); it != finished_at_.end();) {
      if (now - it->second >= retain_seconds_) {
        registry_.RemoveSeries("job_id", it->first);
        it = finished_at_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return registry_.Serialize();
}

}  // namespace adctl
