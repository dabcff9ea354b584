#include "server/metrics/job_metrics.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <optional>

#include "common/job_spec.h"

namespace adctl {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

// The numbers of a DeviceReading, named once for the per-rank (adctl_rank_gpu_<suffix>) and the
// per-node (adctl_gpu_<suffix>) families. A negative reading is not exported.
struct ReadingField {
  const char* suffix;
  const char* help;
  double (*get)(const DeviceReading&);
};
constexpr ReadingField kReadingFields[] = {
    {"utilization_ratio",
     "Busy share of the device (NVML's GPU utilisation; a CPU slot: the rank's share of its "
     "threads' CPU time).",
     [](const DeviceReading& r) { return r.utilization; }},
    {"memory_used_bytes", "Device memory in use (a CPU slot: the rank's resident memory).",
     [](const DeviceReading& r) { return static_cast<double>(r.memory_used_bytes); }},
    {"memory_total_bytes", "Device memory (a CPU slot: the host's memory).",
     [](const DeviceReading& r) { return static_cast<double>(r.memory_total_bytes); }},
    {"power_watts", "Power draw of the GPU (GPUs only).",
     [](const DeviceReading& r) { return r.power_watts; }},
    {"temperature_celsius", "GPU die temperature (GPUs only).",
     [](const DeviceReading& r) { return r.temperature_celsius; }},
    {"sm_clock_hertz", "SM clock of the GPU (GPUs only).",
     [](const DeviceReading& r) { return r.sm_clock_hertz; }},
};

bool Measured(const DeviceReading& r) {
  for (const ReadingField& f : kReadingFields) {
    if (f.get(r) >= 0) return true;
  }
  return false;
}

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
      listed_(RegisterListed(*registry_)),
      eval_loss_(BuildGauge()
                     .Name("adctl_eval_loss")
                     .Help("Latest eval loss on held-out clips (the spec's eval), per timestep "
                           "and overall (timestep=\"all\").")
                     .Register(*registry_)),
      step_duration_(BuildHistogram()
                         .Name("adctl_train_step_duration_seconds")
                         .Help("Wall time of one optimizer step (rank 0).")
                         .Register(*registry_)),
      videos_skipped_(BuildGauge()
                          .Name("adctl_preprocess_videos_skipped")
                          .Help("Videos a preprocess rank's shards skipped so far, by reason "
                                "(missing, unreadable, zero_frames, truncated, too_short).")
                          .Register(*registry_)),
      shards_written_(BuildGauge()
                          .Name("adctl_preprocess_shards_written")
                          .Help("Cache shards a preprocess rank has written (every attempt).")
                          .Register(*registry_)),
      shards_(BuildGauge()
                  .Name("adctl_preprocess_shards")
                  .Help("Cache shards a preprocess rank writes in all.")
                  .Register(*registry_)),
      clips_written_(BuildGauge()
                         .Name("adctl_preprocess_clips_written")
                         .Help("Videos a preprocess rank has cached as clips (every attempt).")
                         .Register(*registry_)),
      videos_per_second_(BuildGauge()
                             .Name("adctl_preprocess_videos_per_second")
                             .Help("Videos a preprocess job decodes per second, cached or "
                                   "skipped, all ranks (rank 0's latest shard).")
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
          BuildGauge().Name("adctl_job_info").Help("Job metadata; value 1.").Register(*registry_)),
      rank_gpu_info_(BuildGauge()
                         .Name("adctl_rank_gpu_info")
                         .Help("The device of a job's rank (gpu, uuid, model); value 1.")
                         .Register(*registry_)),
      gpu_info_(BuildGauge()
                    .Name("adctl_gpu_info")
                    .Help("A device of this node (gpu, kind, model, uuid) and the job holding it "
                          "(job_id, \"\" when free); value 1.")
                    .Register(*registry_)) {
  // Every state is exported from the start, 0 until a job is in it.
  for (JobState s : kAllJobStates) jobs_.Add({{"state", JobStateName(s)}});
  for (const ReadingField& f : kReadingFields) {
    rank_gpu_.push_back(&BuildGauge()
                             .Name(std::string("adctl_rank_gpu_") + f.suffix)
                             .Help(std::string(f.help) + " Per rank, sampled at its step.")
                             .Register(*registry_));
    gpu_.push_back(&BuildGauge()
                        .Name(std::string("adctl_gpu_") + f.suffix)
                        .Help(std::string(f.help) + " Per device of this node, at the scrape.")
                        .Register(*registry_));
  }
}

std::vector<JobMetrics::ListedFamily> JobMetrics::RegisterListed(prometheus::Registry& registry) {
  std::vector<ListedFamily> out;
  for (const PrometheusSeries& row : kPrometheusSeries) {
    ListedFamily f{&row, nullptr, nullptr};
    if (row.kind == SeriesKind::kRankCounter) {
      f.counter = &BuildCounter().Name(row.family).Help(row.help).Register(registry);
    } else {
      f.gauge = &BuildGauge().Name(row.family).Help(row.help).Register(registry);
    }
    out.push_back(f);
  }
  return out;
}

void JobMetrics::AttachDevices(std::vector<Device> inventory,
                               std::function<std::vector<DeviceStatus>()> live) {
  std::lock_guard<std::mutex> lock(mu_);
  inventory_ = std::move(inventory);
  live_ = std::move(live);
}

const std::vector<std::string>& JobMetrics::RankDevices(const std::string& job_id, int attempt) {
  auto key = std::make_pair(job_id, attempt);
  auto it = rank_devices_.find(key);
  if (it != rank_devices_.end()) return it->second;
  std::vector<std::string> devices;
  if (auto a = store_->GetAttempt(job_id, attempt); a.ok()) devices = a->devices;
  return rank_devices_.emplace(key, std::move(devices)).first->second;
}

bool JobMetrics::Trains(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = trains_.find(job_id);
  if (it != trains_.end()) return it->second;
  bool trains = true;
  if (auto job = store_->GetJob(job_id); job.ok()) {
    auto spec = ParseJobSpec(job->spec_yaml);
    trains = !spec.ok() || spec->kind != JobKind::kPreprocess;
  }
  return trains_.emplace(job_id, trains).first->second;
}

void JobMetrics::UpdateRankDevice(const MetricRecord& m) {
  const DeviceReading reading = DeviceValuesOf(m);
  if (!Measured(reading)) return;
  std::string gpu, uuid, model;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_reading_[{m.job_id, m.rank}] = reading;
    const auto& devices = RankDevices(m.job_id, m.attempt);
    if (m.rank >= 0 && m.rank < static_cast<int>(devices.size())) gpu = devices[m.rank];
    for (const Device& d : inventory_) {
      if (d.name != gpu) continue;
      uuid = d.uuid;
      model = d.model;
    }
  }
  const std::string rank = std::to_string(m.rank);
  const prometheus::Labels labels{{"job_id", m.job_id}, {"rank", rank}, {"gpu", gpu}};
  prometheus::Labels info = labels;
  info["uuid"] = uuid;
  info["model"] = model;
  {
    // A restart may put the rank on another device: the old device's series go.
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, added] = rank_device_labels_.emplace(std::make_pair(m.job_id, m.rank), info);
    if (!added && it->second != info) {
      prometheus::Labels old = it->second;
      RemoveSeries(rank_gpu_info_, m.job_id, old);
      old.erase("uuid");
      old.erase("model");
      for (auto* family : rank_gpu_) RemoveSeries(*family, m.job_id, old);
      it->second = info;
    }
  }
  for (size_t i = 0; i < rank_gpu_.size(); ++i) {
    const double v = kReadingFields[i].get(reading);
    if (v >= 0)
      WithSeries(*rank_gpu_[i], m.job_id, labels, [v](prometheus::Gauge& g) { g.Set(v); });
  }
  WithSeries(rank_gpu_info_, m.job_id, info, [](prometheus::Gauge& g) { g.Set(1); });
}

void JobMetrics::RemoveSeries(prometheus::Family<prometheus::Gauge>& family,
                              const std::string& job_id, const prometheus::Labels& labels) {
  if (!family.Has(labels)) return;
  prometheus::Gauge* series = &family.Add(labels);
  family.Remove(series);
  auto& removers = removers_[job_id];
  removers.erase(std::remove_if(removers.begin(), removers.end(),
                                [series](const auto& r) { return r.first == series; }),
                 removers.end());
}

void JobMetrics::UpdateNodeDevices(const std::vector<DeviceStatus>& devices) {
  std::lock_guard<std::mutex> lock(mu_);
  // A device's holder changes between scrapes: its series are made anew each time.
  for (const auto& remove : node_removers_) remove();
  node_removers_.clear();
  const auto set = [this](prometheus::Family<prometheus::Gauge>& family,
                          const prometheus::Labels& labels, double v) {
    prometheus::Gauge& g = family.Add(labels);
    g.Set(v);
    node_removers_.push_back([&family, &g] { family.Remove(&g); });
  };
  for (const DeviceStatus& s : devices) {
    const Device& d = s.device;
    set(gpu_info_,
        {{"gpu", d.name},
         {"kind", d.kind},
         {"model", d.model},
         {"uuid", d.uuid},
         {"job_id", s.job_id}},
        1);
    // A GPU has NVML's sample; a CPU slot has the numbers its holder rank last reported.
    DeviceReading reading = d.reading;
    if (d.kind != "gpu" && !s.job_id.empty()) {
      auto it = last_reading_.find({s.job_id, s.rank});
      if (it != last_reading_.end()) reading = it->second;
    }
    for (size_t i = 0; i < gpu_.size(); ++i) {
      const double v = kReadingFields[i].get(reading);
      if (v >= 0) set(*gpu_[i], {{"gpu", d.name}}, v);
    }
  }
}

template <typename T, typename Update, typename... Args>
void JobMetrics::WithSeries(prometheus::Family<T>& family, const std::string& job_id,
                            const prometheus::Labels& labels, const Update& update,
                            Args&&... args) {
  // Under mu_: DropJob cannot remove the series between its lookup and its update.
  std::lock_guard<std::mutex> lock(mu_);
  const bool existed = family.Has(labels);
  T& series = family.Add(labels, std::forward<Args>(args)...);
  if (!existed) {
    removers_[job_id].emplace_back(&series, [&family, &series] { family.Remove(&series); });
  }
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
    if (!Trains(m.job_id)) {
      // A preprocess rank trains nothing: its own series, no adctl_train_* ones.
      WithSeries(shards_written_, m.job_id, per_rank, set(static_cast<double>(m.step)));
      WithSeries(shards_, m.job_id, per_rank, set(static_cast<double>(m.total_steps)));
      WithSeries(clips_written_, m.job_id, per_rank, set(static_cast<double>(m.samples_seen)));
      // Every reason from the first point, zeros too: the skip rate is defined from the start.
      ForEachVideoSkipCount(m, [&](const char* reason, int64_t n) {
        prometheus::Labels labels = per_rank;
        labels["reason"] = reason;
        WithSeries(videos_skipped_, m.job_id, labels, set(static_cast<double>(n)));
      });
      UpdateRankDevice(m);
      if (m.rank == 0 && m.clips_per_second > 0) {
        WithSeries(videos_per_second_, m.job_id, {{"job_id", m.job_id}}, set(m.clips_per_second));
      }
      continue;
    }
    const prometheus::Labels job{{"job_id", m.job_id}};
    for (const ListedFamily& f : listed_) {
      if (f.row->kind == SeriesKind::kJobGauge && m.rank != 0) continue;  // rank 0's alone
      const std::optional<double> v = MetricValueByName(m, f.row->value);
      if (!v || (f.row->positive_only && *v <= 0)) continue;
      if (f.counter != nullptr) {
        WithSeries(*f.counter, m.job_id, per_rank, add(*v));
      } else {
        WithSeries(*f.gauge, m.job_id, f.row->kind == SeriesKind::kJobGauge ? job : per_rank,
                   set(*v));
      }
    }
    UpdateRankDevice(m);
    if (m.rank != 0) continue;
    if (m.eval_loss >= 0) {
      WithSeries(eval_loss_, m.job_id, {{"job_id", m.job_id}, {"timestep", "all"}},
                 set(m.eval_loss));
      for (const auto& [t, loss] : m.eval_by_timestep) {
        WithSeries(eval_loss_, m.job_id, {{"job_id", m.job_id}, {"timestep", std::to_string(t)}},
                   set(loss));
      }
    }
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
  const double at = c.created_at > 0 ? c.created_at : store_->clock()->Now();
  WithSeries(checkpoint_last_success_, c.job_id, job, [at](prometheus::Gauge& g) { g.Set(at); });
  WithSeries(checkpoint_size_, c.job_id, job,
             [&](prometheus::Gauge& g) { g.Set(static_cast<double>(c.size_bytes)); });
}

void JobMetrics::OnRestart(const std::string& job_id) {
  WithSeries(restarts_, job_id, {{"job_id", job_id}},
             [](prometheus::Counter& c) { c.Increment(); });
}

void JobMetrics::AddCountersAtZero(const JobRecord& j) {
  // rate() and increase() need a series before its first increment: a job's counters exist,
  // at 0, from its first scrape on (dashboards show 0, not "No data"); OnRestart and OnMetrics
  // add to these same series.
  const auto none = [](auto&) {};
  WithSeries(restarts_, j.id, {{"job_id", j.id}}, none);
  if (!Trains(j.id)) return;  // a preprocess job: no training series
  WithSeries(step_duration_, j.id, {{"job_id", j.id}}, none, step_buckets_);
  for (int rank = 0; rank < j.gpus; ++rank) {
    const prometheus::Labels per_rank{{"job_id", j.id}, {"rank", std::to_string(rank)}};
    for (const ListedFamily& f : listed_) {
      if (f.counter != nullptr) WithSeries(*f.counter, j.id, per_rank, none);
    }
  }
}

void JobMetrics::OnJobFinished(const std::string& job_id, JobState /*state*/) {
  std::lock_guard<std::mutex> lock(mu_);
  finished_at_[job_id] = store_->clock()->Now();
}

void JobMetrics::DropJob(const std::string& job_id) {
  trains_.erase(job_id);
  for (auto r = rank_devices_.begin(); r != rank_devices_.end();) {
    r = r->first.first == job_id ? rank_devices_.erase(r) : std::next(r);
  }
  for (auto r = last_reading_.begin(); r != last_reading_.end();) {
    r = r->first.first == job_id ? last_reading_.erase(r) : std::next(r);
  }
  for (auto r = rank_device_labels_.begin(); r != rank_device_labels_.end();) {
    r = r->first.first == job_id ? rank_device_labels_.erase(r) : std::next(r);
  }
  auto it = removers_.find(job_id);
  if (it == removers_.end()) return;
  for (const auto& [series, remove] : it->second) remove();
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
  // Running jobs, and ended ones whose series are still kept: a job that ran between two
  // scrapes has its info next to its other series.
  std::vector<JobRecord> listed;
  if (auto active = store_->ListActiveJobs(); active.ok()) listed = std::move(active.value());
  std::vector<std::string> ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, at] : finished_at_) ended.push_back(id);
  }
  for (const std::string& id : ended) {
    if (auto j = store_->GetJob(id); j.ok()) listed.push_back(std::move(j.value()));
  }
  for (const JobRecord& j : listed) {
    // What the job trains: "motion_modules", "lora" (with its rank) or "preprocess".
    std::string trains = "motion_modules", rank = "0";
    if (auto spec = ParseJobSpec(j.spec_yaml); spec.ok()) {
      if (spec->kind == JobKind::kPreprocess) trains = "preprocess";
      if (spec->model.lora.enabled()) {
        trains = "lora";
        rank = std::to_string(spec->model.lora.rank);
      }
    }
    WithSeries(job_info_, j.id,
               {{"job_id", j.id}, {"name", j.name}, {"trains", trains}, {"lora_rank", rank}},
               [](prometheus::Gauge& g) { g.Set(1); });
    AddCountersAtZero(j);
  }
  std::function<std::vector<DeviceStatus>()> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    live = live_;
  }
  // Outside mu_: the monitor takes its own lock and NVML may take a while.
  if (live) UpdateNodeDevices(live());
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double now = store_->clock()->Now();
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
