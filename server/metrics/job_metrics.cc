#include "server/metrics/job_metrics.h"

#include <prometheus/text_serializer.h>

#include <algorithm>

namespace adctl {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i) out.push_back(i == 0 ? start : out.back() * factor);
  return out;
}

JobMetrics::JobMetrics(Store* store, double retain_seconds)
    : store_(store),
      retain_seconds_(retain_seconds),
      step_buckets_(ExponentialBuckets(0.01, 2, 14)),
      registry_(std::make_shared<prometheus::Registry>()),
      jobs_(BuildGauge()
                .Name("adctl_jobs")
                .Help("Jobs known to adctld, by state.")
                .Register(*registry_)),
      loss_(BuildGauge()
                .Name("adctl_train_loss")
                .Help("Latest training loss (mean over ranks).")
                .Register(*registry_)),
      learning_rate_(BuildGauge()
                         .Name("adctl_train_learning_rate")
                         .Help("Learning rate of the latest optimizer step.")
                         .Register(*registry_)),
      global_step_(BuildGauge()
                       .Name("adctl_train_global_step")
                       .Help("Optimizer steps done.")
                       .Register(*registry_)),
      total_steps_(BuildGauge()
                       .Name("adctl_train_total_steps")
                       .Help("Optimizer steps the job runs.")
                       .Register(*registry_)),
      clips_per_second_(BuildGauge()
                            .Name("adctl_train_clips_per_second")
                            .Help("Training throughput of all ranks, clips per second.")
                            .Register(*registry_)),
      mfu_(BuildGauge()
               .Name("adctl_train_mfu_ratio")
               .Help("Model FLOPs utilisation of rank 0's GPU (training FLOPs per clip x clips/s "
                     "per rank / dense bf16 peak); absent on CPU ranks.")
               .Register(*registry_)),
      step_duration_(BuildHistogram()
                         .Name("adctl_train_step_duration_seconds")
                         .Help("Wall time of one optimizer step (rank 0).")
                         .Register(*registry_)),
      data_wait_(BuildCounter()
                     .Name("adctl_train_data_wait_seconds_total")
                     .Help("Time a rank waited for its next batch.")
                     .Register(*registry_)),
      allreduce_exposed_(BuildCounter()
                             .Name("adctl_train_allreduce_exposed_seconds_total")
                             .Help("All-reduce time not hidden behind backward.")
                             .Register(*registry_)),
      peak_memory_(BuildGauge()
                       .Name("adctl_train_peak_memory_bytes")
                       .Help("Device memory high-water mark of a rank.")
                       .Register(*registry_)),
      checkpoint_last_success_(BuildGauge()
                                   .Name("adctl_checkpoint_last_success_timestamp_seconds")
                                   .Help("Unix time of the newest committed checkpoint.")
                                   .Register(*registry_)),
      checkpoint_size_(BuildGauge()
                           .Name("adctl_checkpoint_size_bytes")
                           .Help("Size of the newest committed checkpoint.")
                           .Register(*registry_)),
      restarts_(BuildCounter()
                    .Name("adctl_job_restarts_total")
                    .Help("Attempts started by the restart policy.")
                    .Register(*registry_)),
      job_info_(
          BuildGauge().Name("adctl_job_info").Help("Job metadata; value 1.").Register(*registry_)) {
  // Every state is exported from the start, 0 until a job is in it.
  for (JobState s : kAllJobStates) jobs_.Add({{"state", JobStateName(s)}});
}

template <typename T, typename Update, typename... Args>
void JobMetrics::WithSeries(prometheus::Family<T>& family, const std::string& job_id,
                            const prometheus::Labels& labels, const Update& update,
                            Args&&... args) {
  // Under mu_: DropJob cannot remove the series between its lookup and its update.
  std::lock_guard<std::mutex> lock(mu_);
  const bool existed = family.Has(labels);
  T& series = family.Add(labels, std::forward<Args>(args)...);
  if (!existed) removers_[job_id].push_back([&family, &series] { family.Remove(&series); });
  update(series);
}

void JobMetrics::OnMetrics(const std::vector<MetricRecord>& points) {
  for (const MetricRecord& m : points) {
    const std::string rank = std::to_string(m.rank);
    const prometheus::Labels per_rank{{"job_id", m.job_id}, {"rank", rank}};
    const auto set = [](double v) { return [v](prometheus::Gauge& g) { g.Set(v); }; };
    const auto add = [](double v) {
      return [v](prometheus::Counter& c) { c.Increment(std::max(0.0, v)); };
    };
    WithSeries(data_wait_, m.job_id, per_rank, add(m.data_wait_seconds));
    WithSeries(allreduce_exposed_, m.job_id, per_rank, add(m.allreduce_exposed_seconds));
    if (m.peak_memory_bytes > 0) {
      WithSeries(peak_memory_, m.job_id, per_rank, set(static_cast<double>(m.peak_memory_bytes)));
    }
    if (m.rank != 0) continue;
    const prometheus::Labels job{{"job_id", m.job_id}};
    WithSeries(loss_, m.job_id, job, set(m.loss));
    WithSeries(learning_rate_, m.job_id, job, set(m.learning_rate));
    WithSeries(global_step_, m.job_id, job, set(static_cast<double>(m.step)));
    WithSeries(total_steps_, m.job_id, job, set(static_cast<double>(m.total_steps)));
    WithSeries(clips_per_second_, m.job_id, job, set(m.clips_per_second));
    if (m.mfu_ratio > 0) WithSeries(mfu_, m.job_id, job, set(m.mfu_ratio));
    WithSeries(
        step_duration_, m.job_id, job,
        [&](prometheus::Histogram& h) {
          if (m.step_seconds > 0) h.Observe(m.step_seconds);
        },
        step_buckets_);
  }
}

void JobMetrics::OnCheckpoint(const CheckpointRecord& c) {
  const prometheus::Labels job{{"job_id", c.job_id}};
  const double at = c.created_at > 0 ? c.created_at : NowSeconds();
  WithSeries(checkpoint_last_success_, c.job_id, job, [at](prometheus::Gauge& g) { g.Set(at); });
  WithSeries(checkpoint_size_, c.job_id, job,
             [&](prometheus::Gauge& g) { g.Set(static_cast<double>(c.size_bytes)); });
}

void JobMetrics::OnRestart(const std::string& job_id) {
  WithSeries(restarts_, job_id, {{"job_id", job_id}},
             [](prometheus::Counter& c) { c.Increment(); });
}

void JobMetrics::OnJobFinished(const std::string& job_id, JobState /*state*/) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_at_[job_id] = NowSeconds();
}

void JobMetrics::DropJob(const std::string& job_id) {
  auto it = removers_.find(job_id);
  if (it == removers_.end()) return;
  for (const auto& remove : it->second) remove();
  removers_.erase(it);
}

size_t JobMetrics::SeriesOf(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = removers_.find(job_id);
  return it == removers_.end() ? 0 : it->second.size();
}

std::string JobMetrics::Scrape() {
  if (auto counts = store_->CountJobsByState(); counts.ok()) {
    for (JobState s : kAllJobStates) jobs_.Add({{"state", JobStateName(s)}}).Set(0);
    for (const auto& [state, n] : counts.value()) {
      jobs_.Add({{"state", JobStateName(state)}}).Set(static_cast<double>(n));
    }
  }
  if (auto active = store_->ListActiveJobs(); active.ok()) {
    for (const JobRecord& j : active.value()) {
      WithSeries(job_info_, j.id, {{"job_id", j.id}, {"name", j.name}},
                 [](prometheus::Gauge& g) { g.Set(1); });
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = NowSeconds();
    for (auto it = finished_at_.begin(); it != finished_at_.end();) {
      if (now - it->second >= retain_seconds_) {
        DropJob(it->first);
        it = finished_at_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace adctl
