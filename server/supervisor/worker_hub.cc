#include "server/supervisor/worker_hub.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "common/job_layout.h"
#include "common/job_spec.h"
#include "common/worker_contract.h"
#include "server/supervisor/secrets.h"

namespace adctl {

namespace {

// A report adctld could not store (its disk full or read-only, SQLite failing) is not lost: the
// rank is told to keep it and send it again (UNAVAILABLE is what its client retries).
Status KeepAndRetry(Status stored, const std::string& what) {
  if (stored.ok() || stored.code() == StatusCode::kNotFound ||
      stored.code() == StatusCode::kInvalidArgument) {
    return stored;
  }
  spdlog::error("cannot store {}: {}", what, stored.message());
  return Unavailable("adctld could not store " + what + " (" + stored.message() +
                     "); keep it and send it again");
}

}  // namespace

Result<bool> WorkerHub::Authorize(const std::string& job_id, int attempt, int rank,
                                  const std::string& token) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  const std::string which = "job " + job_id + " attempt " + std::to_string(attempt);
  auto a = store_->GetAttempt(job_id, attempt);
  if (!a.ok()) {
    if (a.status().code() != StatusCode::kNotFound) return a.status();
    return Status(StatusCode::kPermissionDenied,
                  "job " + job_id + " has no attempt " + std::to_string(attempt));
  }
  if (rank < 0 || rank >= a->world_size) {
    return Status(StatusCode::kPermissionDenied, which + " has no rank " + std::to_string(rank) +
                                                     " (" + std::to_string(a->world_size) +
                                                     " ranks)");
  }
  // A rank's token is its own (RankToken): one rank cannot report as another.
  if (token.empty() || a->token_sha256.empty() ||
      !SameSecret(Sha256Hex(token), Sha256Hex(RankToken(a->token_sha256, rank)))) {
    return false;
  }
  if (a->ended_at > 0 || attempt != job->attempt || IsTerminal(job->state)) {
    return FailedPrecondition(which + " has ended; its token is no longer accepted");
  }
  return true;
}

Result<JobRecord> WorkerHub::CurrentAttempt(const std::string& job_id, int attempt) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (attempt != job->attempt) {
    return FailedPrecondition("job " + job_id + ": attempt " + std::to_string(attempt) +
                              " superseded by attempt " + std::to_string(job->attempt));
  }
  if (IsTerminal(job->state)) {
    return FailedPrecondition("job " + job_id + " already ended (" + JobStateName(job->state) +
                              ")");
  }
  return job;
}

Status WorkerHub::RegisterRank(const std::string& job_id, int attempt, int rank, int world_size,
                               int pid, const std::string& host) {
  auto job = CurrentAttempt(job_id, attempt);
  if (!job.ok()) return job.status();
  if (world_size != job->gpus || rank < 0 || rank >= world_size) {
    return InvalidArgument("rank " + std::to_string(rank) + " of world size " +
                           std::to_string(world_size) + " does not match job " + job_id + " (" +
                           std::to_string(job->gpus) + " ranks)");
  }
  ADCTL_RETURN_IF_ERROR(store_->RecordRankWorker(job_id, attempt, rank, pid, host, clock_->Now()));
  recorder_->AddEvent(job_id, attempt, "worker", "info",
                      "rank " + std::to_string(rank) + " registered (pid " + std::to_string(pid) +
                          " on " + host + ")");
  return Status::Ok();
}

Result<std::pair<bool, std::string>> WorkerHub::Heartbeat(const std::string& job_id, int attempt,
                                                          int rank, int pid) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (attempt != job->attempt || IsTerminal(job->state)) {
    return std::make_pair(true, std::string("attempt superseded"));
  }
  const double now = clock_->Now();
  if (pid > 0) {
    // Registers the pid when the registration was lost (adctld restarted in between).
    auto ranks = store_->ListRanks(job_id, attempt);
    if (ranks.ok()) {
      for (const RankRecord& r : ranks.value()) {
        if (r.rank == rank && r.worker_pid != pid) {
          store_->RecordRankWorker(job_id, attempt, rank, pid, r.host, now);
        }
      }
    }
  }
  store_->RecordHeartbeat(job_id, attempt, rank, now);
  if (job->state == JobState::kCancelling) return std::make_pair(true, std::string("cancel"));
  if (job->state == JobState::kPausing) return std::make_pair(true, std::string("pause"));
  return std::make_pair(false, std::string());
}

Status WorkerHub::KvSet(const std::string& job_id, int attempt, const std::string& key,
                        const std::string& value) {
  auto job = CurrentAttempt(job_id, attempt);
  if (!job.ok()) return job.status();
  ADCTL_RETURN_IF_ERROR(store_->KvSet(job_id, attempt, key, value));
  changes_->Notify();
  return Status::Ok();
}

Result<std::optional<std::string>> WorkerHub::KvGet(const std::string& job_id, int attempt,
                                                    const std::string& key, int timeout_ms) {
  auto job = CurrentAttempt(job_id, attempt);
  if (!job.ok()) return job.status();
  // A real-time deadline: this is a network long poll, not coordinator logic.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::clamp(timeout_ms, 0, 30000));
  uint64_t version = changes_->version();
  while (true) {
    auto value = store_->KvGet(job_id, attempt, key);
    if (!value.ok() || value->has_value()) return value;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::optional<std::string>();
    changes_->WaitForChange(&version, static_cast<int>(std::min<int64_t>(left.count(), 500)));
    if (changes_->closed()) return Unavailable("adctld is shutting down");
  }
}

Status WorkerHub::ReportMetrics(const std::string& job_id, int attempt, int rank,
                                std::vector<MetricRecord> points) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (attempt != job->attempt) return Status::Ok();  // late points of an old attempt: dropped
  for (MetricRecord& m : points) {
    m.job_id = job_id;
    m.attempt = attempt;
    m.rank = rank;
    if (m.time == 0) m.time = clock_->Now();
  }
  ADCTL_RETURN_IF_ERROR(KeepAndRetry(store_->AddMetrics(points), "metric points"));
  if (metrics_max_points_ > 0 &&
      (points_since_thinning_ += static_cast<int64_t>(points.size())) >= metrics_max_points_) {
    // A flood of points cannot outrun the bound: each pass thins the older half of every
    // series over it, so a few passes bring them back under.
    points_since_thinning_ = 0;
    for (int pass = 0; pass < 8; ++pass) {
      auto thinned = store_->ThinMetrics(std::max<int64_t>(4, metrics_max_points_));
      if (!thinned.ok() || *thinned == 0) break;
    }
  }
  if (recorder_->observer()) recorder_->observer()->OnMetrics(points);
  if (job->state == JobState::kStarting && !points.empty()) {
    recorder_->Transition(job_id, JobState::kRunning, "running (first step reported)", {},
                          JobState::kStarting);
  }
  changes_->Notify();
  return Status::Ok();
}

Status WorkerHub::ReportTrainingStarted(const std::string& job_id, int attempt, int rank,
                                        int64_t resumed_from_step, int64_t total_steps) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  if (attempt != job->attempt) return Status::Ok();
  if (rank == 0 && job->state == JobState::kStarting) {
    // A preprocess rank counts shards (its own: every world_size-th), not optimizer steps.
    auto spec = ParseJobSpec(job->spec_yaml);
    const bool preprocess = spec.ok() && spec->kind == JobKind::kPreprocess;
    std::string msg;
    if (preprocess) {
      msg = resumed_from_step > 0
                ? "preprocessing resumed (rank 0: " + std::to_string(resumed_from_step) + " of " +
                      std::to_string(total_steps) + " shards already written)"
                : "preprocessing started (rank 0: " + std::to_string(total_steps) + " shards)";
    } else {
      msg = resumed_from_step > 0
                ? "training resumed from checkpoint step " + std::to_string(resumed_from_step) +
                      " of " + std::to_string(total_steps)
                : "training started (" + std::to_string(total_steps) + " steps)";
    }
    recorder_->Transition(job_id, JobState::kRunning, msg, {}, JobState::kStarting);
  }
  return Status::Ok();
}

Status WorkerHub::ReportCheckpoint(const std::string& job_id, int attempt, int /*rank*/,
                                   CheckpointRecord checkpoint) {
  // A rank may only name a checkpoint inside its own job's checkpoint folder (after symlinks):
  // the path is listed, resumed from and exported.
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root =
      fs::weakly_canonical(JobLayout(job->job_dir).checkpoints(job->checkpoint_dir), ec);
  const fs::path path = fs::weakly_canonical(checkpoint.path, ec);
  const std::string inside = root.string() + "/";
  if (ec || checkpoint.path.empty() || checkpoint.path.front() != '/' ||
      path.string().compare(0, inside.size(), inside) != 0) {
    return Status(StatusCode::kPermissionDenied,
                  "checkpoint path '" + checkpoint.path.substr(0, 200) +
                      "' is not inside the job's checkpoint folder " + root.string());
  }
  checkpoint.job_id = job_id;
  checkpoint.attempt = attempt;
  if (checkpoint.created_at == 0) checkpoint.created_at = clock_->Now();
  ADCTL_RETURN_IF_ERROR(KeepAndRetry(store_->AddCheckpoint(checkpoint), "a checkpoint record"));
  recorder_->AddEvent(
      job_id, attempt, "checkpoint", "info",
      "checkpoint step " + std::to_string(checkpoint.step) + " committed: " + checkpoint.path);
  if (recorder_->observer()) recorder_->observer()->OnCheckpoint(checkpoint);
  return Status::Ok();
}

Status WorkerHub::ReportSamples(const std::string& job_id, int attempt, int rank,
                                std::vector<SampleRecord> samples, const std::string& message) {
  auto job = store_->GetJob(job_id);
  if (!job.ok()) return job.status();
  const JobLayout layout(job->job_dir);
  for (SampleRecord& s : samples) {
    for (const std::string* path : {&s.mp4, &s.gif}) {
      auto checked = layout.artifact(*path);
      if (!checked.ok()) return checked.status();
      if (path->rfind("samples/", 0) != 0) {
        return InvalidArgument("sample file '" + *path + "': not under samples/");
      }
    }
    s.job_id = job_id;
    s.attempt = attempt;
    if (s.created_at == 0) s.created_at = clock_->Now();
  }
  ADCTL_RETURN_IF_ERROR(KeepAndRetry(store_->AddSamples(samples), "sample records"));
  recorder_->SamplesReady(*job, samples);
  return recorder_->AddEvent(job_id, attempt, "samples", "info",
                             "rank " + std::to_string(rank) + ": " + message);
}

Status WorkerHub::ReportWorkerEvent(const std::string& job_id, int attempt, int rank,
                                    const std::string& level, const std::string& message) {
  return recorder_->AddEvent(job_id, attempt, "worker", level.empty() ? "info" : level,
                             "rank " + std::to_string(rank) + ": " + message);
}

}  // namespace adctl
