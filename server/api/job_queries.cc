#include "server/api/job_queries.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/checkpoint_dir.h"
#include "common/job_layout.h"
#include "common/job_spec.h"
#include "common/metric_values.h"

namespace adctl {

namespace {

Status RequireJobId(const std::string& id) {
  if (id.empty()) return InvalidArgument("job_id: required");
  return Status::Ok();
}

}  // namespace

Result<JobView> JobQueries::GetJob(const std::string& job_id, bool with_ranks) const {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  JobView view;
  view.job = std::move(job.value());
  view.wait_reason = supervisor_->monitor().WaitReason(job_id);
  view.cluster = supervisor_->monitor().ClusterJob(view.job.launcher, view.job.cluster_job);
  if (with_ranks && view.job.attempt > 0) {
    auto ranks = store_->ListRanks(job_id, view.job.attempt);
    if (ranks.ok()) {
      const std::map<int, bool> watched =
          supervisor_->monitor().RanksAlive(job_id, view.job.attempt);
      for (const RankRecord& r : ranks.value()) {
        auto it = watched.find(r.rank);
        view.rank_alive[r.rank] = it != watched.end() && it->second;
      }
      view.ranks = std::move(ranks.value());
    }
  }
  if (auto spec = ParseJobSpec(view.job.spec_yaml);
      spec.ok() && spec->kind == JobKind::kPreprocess) {
    PreprocessView p;
    MetricValues none;
    ForEachVideoSkipCount(none, [&](const char* reason, int64_t) { p.videos_skipped[reason] = 0; });
    if (auto latest = store_->LatestMetricsPerRank(job_id); latest.ok()) {
      for (const MetricRecord& m : latest.value()) {
        p.shards_written += m.step;
        p.shards += m.total_steps;
        p.clips_written += m.samples_seen;
        ForEachVideoSkipCount(
            m, [&](const char* reason, int64_t n) { p.videos_skipped[reason] += n; });
        if (m.rank == 0) p.videos_per_second = m.clips_per_second;
      }
    }
    view.preprocess = std::move(p);
  }
  return view;
}

Result<std::vector<JobView>> JobQueries::ListJobs(const std::vector<JobState>& states, int limit,
                                                  int64_t before_seq,
                                                  const JobSelector& selector) const {
  auto jobs = store_->ListJobs(states, limit, before_seq, selector);
  if (!jobs.ok()) return jobs.status();
  std::vector<JobView> views;
  for (JobRecord& j : jobs.value()) {
    JobView view;
    view.wait_reason = supervisor_->monitor().WaitReason(j.id);
    view.job = std::move(j);
    views.push_back(std::move(view));
  }
  return views;
}

Result<JobQueries::JobPage> JobQueries::ListJobPage(const std::vector<JobState>& states,
                                                    int page_size, const std::string& page_token,
                                                    const JobSelector& selector) const {
  if (page_size < 0) {
    return InvalidArgument("page_size: must be >= 0 (0: 100), got " + std::to_string(page_size));
  }
  const int size = page_size == 0 ? 100 : std::min(page_size, 1000);
  int64_t before = 0;
  if (!page_token.empty()) {
    char* end = nullptr;
    errno = 0;
    before = std::strtoll(page_token.c_str(), &end, 10);
    if (errno != 0 || end == page_token.c_str() || *end != '\0' || before <= 0) {
      return InvalidArgument("page_token: not a token from a previous page");
    }
  }
  auto jobs = ListJobs(states, size + 1, before, selector);
  if (!jobs.ok()) return jobs.status();
  JobPage page;
  page.jobs = std::move(jobs.value());
  if (static_cast<int>(page.jobs.size()) > size) {
    page.jobs.resize(size);
    page.next_page_token = std::to_string(page.jobs.back().job.seq);
  }
  return page;
}

Result<std::vector<EventRecord>> JobQueries::ListEvents(const std::string& job_id, int64_t after_id,
                                                        int limit) const {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  if (limit < 0)
    return InvalidArgument("limit: must be >= 0 (0: all), got " + std::to_string(limit));
  if (after_id < 0) {
    return InvalidArgument("after_event_id: must be >= 0, got " + std::to_string(after_id));
  }
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  return store_->ListEvents(job_id, after_id, limit);
}

std::vector<MetricRecord> DownsampleMetrics(std::vector<MetricRecord> points, int max_per_rank) {
  if (max_per_rank <= 0) return points;
  // Indices of each series, in id order.
  std::map<std::pair<int, int>, std::vector<size_t>> series;
  for (size_t i = 0; i < points.size(); ++i) {
    series[{points[i].attempt, points[i].rank}].push_back(i);
  }
  std::vector<bool> keep(points.size(), false);
  for (const auto& [key, indices] : series) {
    const size_t n = indices.size();
    const size_t want = static_cast<size_t>(max_per_rank);
    if (n <= want) {
      for (size_t i : indices) keep[i] = true;
    } else if (want == 1) {
      keep[indices.back()] = true;
    } else {
      // k-th of `want` points at index round(k·(n-1)/(want-1)): 0 and n-1 included.
      for (size_t k = 0; k < want; ++k)
        keep[indices[(k * (n - 1) + (want - 1) / 2) / (want - 1)]] = true;
    }
  }
  std::vector<MetricRecord> out;
  for (size_t i = 0; i < points.size(); ++i) {
    if (keep[i]) out.push_back(std::move(points[i]));
  }
  return out;
}

Result<std::vector<MetricRecord>> JobQueries::ListMetrics(const std::string& job_id,
                                                          int64_t after_id,
                                                          int max_points_per_rank) const {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  if (max_points_per_rank < 0 || max_points_per_rank > kMaxMetricPointsPerRank) {
    return InvalidArgument("max_points: must be in [1, " + std::to_string(kMaxMetricPointsPerRank) +
                           "], got " + std::to_string(max_points_per_rank));
  }
  if (max_points_per_rank == 0) max_points_per_rank = kDefaultMetricPointsPerRank;
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  auto points = store_->ListMetrics(job_id, after_id);
  if (!points.ok()) return points.status();
  return DownsampleMetrics(std::move(points.value()), max_points_per_rank);
}

Result<std::vector<CheckpointView>> JobQueries::ListCheckpoints(const std::string& job_id) const {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  std::map<int64_t, CheckpointView> by_step;
  if (auto reported = store_->ListCheckpoints(job_id); reported.ok()) {
    for (const CheckpointRecord& c : reported.value()) {
      CheckpointView& out = by_step[c.step];
      static_cast<CheckpointValues&>(out) = c;
      out.created_at = c.created_at;
      out.attempt = c.attempt;
    }
  }
  auto on_disk = adctl::ListCheckpoints(JobLayout(job->job_dir).checkpoints(job->checkpoint_dir));
  if (on_disk.ok()) {
    for (const CheckpointInfo& c : on_disk.value()) {
      CheckpointView& out = by_step[c.step];
      out.step = c.step;
      out.path = c.path;
      out.size_bytes = c.bytes;
      out.on_disk = true;
    }
  }
  if (auto pins = store_->ListCheckpointPins(job_id); pins.ok()) {
    for (int64_t step : *pins) {
      if (auto it = by_step.find(step); it != by_step.end()) it->second.pinned = true;
    }
  }
  std::vector<CheckpointView> out;
  for (auto& [step, c] : by_step) out.push_back(std::move(c));
  return out;
}

Result<std::vector<SampleView>> JobQueries::ListSamples(const std::string& job_id,
                                                        int64_t step) const {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (step < 0) return InvalidArgument("step: must be >= 0, got " + std::to_string(step));
  auto recorded = store_->ListSamples(job_id, step);
  if (!recorded.ok()) return recorded.status();
  const JobLayout layout(job->job_dir);
  std::vector<SampleView> out;
  for (SampleRecord& r : recorded.value()) {
    std::error_code ec;
    const bool on_disk = std::filesystem::is_regular_file(layout.dir() + "/" + r.mp4, ec) &&
                         std::filesystem::is_regular_file(layout.dir() + "/" + r.gif, ec);
    out.push_back({std::move(r), on_disk});
  }
  return out;
}

Result<ArtifactView> JobQueries::Artifact(const std::string& job_id,
                                          const std::string& relative) const {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  auto path = JobLayout(job->job_dir).artifact(relative);
  if (!path.ok()) return path.status();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(*path, ec)) {
    return NotFound("job " + job_id + ": no artifact file '" + relative + "'");
  }
  const auto size = std::filesystem::file_size(*path, ec);
  if (ec) return Internal(relative + ": " + ec.message());
  return ArtifactView{relative, *path, static_cast<int64_t>(size)};
}

Status JobQueries::CheckRankLogRef(const JobRecord& job, int attempt, int rank) {
  if (rank < 0 || rank >= std::max(job.gpus, 1)) {
    return InvalidArgument("rank: job " + job.id + " has ranks 0.." + std::to_string(job.gpus - 1) +
                           ", got " + std::to_string(rank));
  }
  if (attempt < 0 || attempt > job.attempt) {
    return InvalidArgument("attempt: job " + job.id + " has attempts 1.." +
                           std::to_string(job.attempt) + ", got " + std::to_string(attempt));
  }
  return Status::Ok();
}

std::string JobQueries::RankLogPath(const JobRecord& job, int attempt, int rank) const {
  return JobLayout(job.job_dir).rank_log(attempt, rank);
}

LogRead JobQueries::ReadRankLog(const JobRecord& job, int attempt, int rank, int64_t offset,
                                size_t max_bytes, int64_t tail_bytes) const {
  LogRead read;
  read.offset = std::max<int64_t>(offset, 0);
  std::ifstream in(RankLogPath(job, attempt, rank), std::ios::binary);
  if (!in) return read;
  read.exists = true;
  in.seekg(0, std::ios::end);
  read.size = in.tellg();
  if (tail_bytes > 0) read.offset = std::max<int64_t>(0, read.size - tail_bytes);
  if (read.offset > read.size) read.offset = 0;  // replaced by a shorter log: from its start
  if (read.offset == read.size) return read;
  in.seekg(read.offset);
  read.data.resize(std::min<int64_t>(read.size - read.offset, static_cast<int64_t>(max_bytes)));
  in.read(read.data.data(), static_cast<std::streamsize>(read.data.size()));
  read.data.resize(static_cast<size_t>(in.gcount()));
  return read;
}

Result<WatchCursor> JobQueries::StartWatch(const std::string& job_id,
                                           int64_t after_event_id) const {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  WatchCursor cursor;
  cursor.last_event_id = after_event_id;
  // Metrics: only points from now on (the job snapshot carries the progress so far).
  // The newest id is the largest of each rank's newest point (one row per rank, not the history).
  if (auto latest = store_->LatestMetricsPerRank(job_id); latest.ok()) {
    for (const MetricRecord& m : *latest) {
      cursor.last_metric_id = std::max(cursor.last_metric_id, m.id);
    }
  }
  return cursor;
}

Result<WatchBatch> JobQueries::Watch(const std::string& job_id, WatchCursor* cursor) const {
  auto job = GetJob(job_id, /*with_ranks=*/false);
  if (!job.ok()) return job.status();
  WatchBatch batch;
  batch.job = std::move(job.value());
  if (auto events = store_->ListEvents(job_id, cursor->last_event_id); events.ok()) {
    batch.events = std::move(events.value());
    if (!batch.events.empty()) cursor->last_event_id = batch.events.back().id;
  }
  if (auto metrics =
          store_->ListMetrics(job_id, cursor->last_metric_id, std::nullopt, kMaxWatchBatchPoints);
      metrics.ok()) {
    batch.metrics = std::move(metrics.value());
    if (!batch.metrics.empty()) cursor->last_metric_id = batch.metrics.back().id;
  }
  return batch;
}

Result<WatchBatch> JobQueries::WaitForUpdates(const std::string& job_id, WatchCursor* cursor,
                                              int timeout_ms,
                                              const std::function<bool()>& abandoned) const {
  ChangeFeed& changes = supervisor_->changes();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  // The version is read before the store, so a change between the two wakes the wait below.
  uint64_t version = changes.version();
  auto batch = Watch(job_id, cursor);
  while (true) {
    if (!batch.ok() || !batch->events.empty() || !batch->metrics.empty()) return batch;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || changes.closed()) return batch;
    // In slices of a second when the caller may leave; the store is read again on a change.
    const uint64_t seen = version;
    changes.WaitForChange(&version, abandoned ? std::min<int>(static_cast<int>(left.count()), 1000)
                                              : static_cast<int>(left.count()));
    if (abandoned && abandoned()) return batch;
    if (version == seen) continue;  // a quiet slice: nothing new in the store either
    batch = Watch(job_id, cursor);  // `version` is the one read before it (WaitForChange)
  }
}

}  // namespace adctl
