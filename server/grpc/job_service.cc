#include "server/grpc/job_service.h"

#include <fstream>

#include "common/checkpoint_dir.h"
#include "common/job_spec.h"
#include "proto/grpc_status.h"
#include "server/grpc/convert.h"

namespace adctl {

namespace {

Status RequireJobId(const std::string& id) {
  if (id.empty()) return InvalidArgument("job_id: required");
  return Status::Ok();
}

constexpr size_t kLogChunkBytes = 64 * 1024;

#define ADCTL_GRPC_RETURN_IF_ERROR(expr)             \
  do {                                               \
    ::adctl::Status _status = (expr);                \
    if (!_status.ok()) return ToGrpcStatus(_status); \
  } while (0)

}  // namespace

std::string BearerToken(const grpc::ServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  std::string value(it->second.data(), it->second.size());
  const std::string prefix = "Bearer ";
  return value.rfind(prefix, 0) == 0 ? value.substr(prefix.size()) : value;
}

Status JobServiceImpl::CheckToken(grpc::ServerContext* ctx) const {
  if (user_token_.empty() || BearerToken(ctx) == user_token_) return Status::Ok();
  return Status(StatusCode::kPermissionDenied,
                "missing or wrong token: set ADCTL_TOKEN or token: in ~/.config/adctl/config.yaml");
}

Result<v1::Job> JobServiceImpl::LoadJob(const std::string& job_id, bool with_ranks) {
  ADCTL_RETURN_IF_ERROR(RequireJobId(job_id));
  auto job = supervisor_->store()->GetJob(job_id);
  if (!job.ok()) return job.status();
  v1::Job out;
  JobToProto(job.value(), supervisor_->WaitReason(job_id), &out);
  if (with_ranks) {
    std::map<int, bool> alive;
    auto ranks = supervisor_->LiveRanks(job_id, &alive);
    RanksToProto(ranks, alive, &out);
  }
  return out;
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                       v1::SubmitJobResponse* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  if (req->spec_yaml().empty()) {
    return ToGrpcStatus(InvalidArgument("spec_yaml: required (the job spec file's text)"));
  }
  SubmitRequest r;
  r.spec_yaml = req->spec_yaml();
  r.overrides.assign(req->overrides().begin(), req->overrides().end());
  if (req->has_gpus()) r.gpus = req->gpus();
  if (req->has_priority()) r.priority = req->priority();
  r.submission_id = req->submission_id();
  auto submitted = supervisor_->Submit(r);
  if (!submitted.ok()) return ToGrpcStatus(submitted.status());
  JobToProto(submitted->first, supervisor_->WaitReason(submitted->first.id), resp->mutable_job());
  resp->set_created(submitted->second);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                    v1::Job* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  auto job = LoadJob(req->job_id(), /*with_ranks=*/true);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = job.value();
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  std::vector<JobState> states;
  for (int s : req->states()) {
    if (s < static_cast<int>(JobState::kQueued) || s > static_cast<int>(JobState::kCancelled)) {
      return ToGrpcStatus(InvalidArgument("states: unknown state " + std::to_string(s)));
    }
    states.push_back(static_cast<JobState>(s));
  }
  if (req->page_size() < 0) return ToGrpcStatus(InvalidArgument("page_size: must be >= 0"));
  const int page_size = req->page_size() == 0 ? 100 : std::min(req->page_size(), 1000);
  int64_t before = 0;
  if (!req->page_token().empty()) {
    try {
      before = std::stoll(req->page_token());
    } catch (...) {
      return ToGrpcStatus(InvalidArgument("page_token: not a token from ListJobs"));
    }
  }
  auto jobs = supervisor_->store()->ListJobs(states, page_size + 1, before);
  if (!jobs.ok()) return ToGrpcStatus(jobs.status());
  for (size_t i = 0; i < jobs->size() && static_cast<int>(i) < page_size; ++i) {
    const JobRecord& j = (*jobs)[i];
    JobToProto(j, supervisor_->WaitReason(j.id), resp->add_jobs());
  }
  if (static_cast<int>(jobs->size()) > page_size) {
    resp->set_next_page_token(std::to_string((*jobs)[page_size - 1].seq));
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                       v1::Job* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  std::optional<double> grace;
  if (req->has_grace_seconds()) {
    if (req->grace_seconds() < 0) {
      return ToGrpcStatus(InvalidArgument("grace_seconds: must be >= 0"));
    }
    grace = req->grace_seconds();
  }
  auto job = supervisor_->Cancel(req->job_id(), grace, req->force());
  if (!job.ok()) return ToGrpcStatus(job.status());
  JobToProto(job.value(), "", resp);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::PauseJob(grpc::ServerContext* ctx, const v1::PauseJobRequest* req,
                                      v1::Job* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  std::optional<double> grace;
  if (req->has_grace_seconds()) {
    if (req->grace_seconds() < 0) {
      return ToGrpcStatus(InvalidArgument("grace_seconds: must be >= 0"));
    }
    grace = req->grace_seconds();
  }
  auto job = supervisor_->Pause(req->job_id(), grace);
  if (!job.ok()) return ToGrpcStatus(job.status());
  JobToProto(job.value(), "", resp);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req,
                                       v1::Job* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  std::optional<int> gpus;
  if (req->has_gpus()) gpus = req->gpus();
  auto job = supervisor_->Resume(req->job_id(), gpus);
  if (!job.ok()) return ToGrpcStatus(job.status());
  JobToProto(job.value(), "", resp);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::JobUpdate>* writer) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  Store* store = supervisor_->store();
  auto first = store->GetJob(req->job_id());
  if (!first.ok()) return ToGrpcStatus(first.status());
  int64_t last_event = req->after_event_id();
  // Metrics: only points from now on (the snapshot carries the progress so far).
  int64_t last_metric = 0;
  if (auto all = store->ListMetrics(req->job_id(), 0, 0); all.ok() && !all->empty()) {
    last_metric = all->back().id;
  }
  std::string last_snapshot;
  uint64_t version = 0;
  while (!ctx->IsCancelled()) {
    auto job = LoadJob(req->job_id(), /*with_ranks=*/false);
    if (!job.ok()) return ToGrpcStatus(job.status());
    auto events = store->ListEvents(req->job_id(), last_event);
    if (events.ok()) {
      for (const EventRecord& e : events.value()) {
        v1::JobUpdate u;
        EventToProto(e, u.mutable_event());
        if (!writer->Write(u)) return grpc::Status::OK;
        last_event = e.id;
      }
    }
    auto metrics = store->ListMetrics(req->job_id(), last_metric, 0);
    if (metrics.ok()) {
      for (const MetricRecord& m : metrics.value()) {
        v1::JobUpdate u;
        MetricToProto(m, u.mutable_metric());
        if (!writer->Write(u)) return grpc::Status::OK;
        last_metric = m.id;
      }
    }
    std::string snapshot = job->SerializeAsString();
    if (snapshot != last_snapshot) {
      v1::JobUpdate u;
      *u.mutable_job() = job.value();
      if (!writer->Write(u)) return grpc::Status::OK;
      last_snapshot = snapshot;
    }
    if (IsTerminal(static_cast<JobState>(job->state()))) return grpc::Status::OK;
    supervisor_->WaitForChange(&version, 1000);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::StreamLogs(grpc::ServerContext* ctx, const v1::StreamLogsRequest* req,
                                        grpc::ServerWriter<v1::LogChunk>* writer) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  Store* store = supervisor_->store();
  auto job = store->GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  if (req->rank() < 0 || req->rank() >= std::max(job->gpus, 1)) {
    return ToGrpcStatus(InvalidArgument("rank: job " + job->id + " has ranks 0.." +
                                        std::to_string(job->gpus - 1) + ", got " +
                                        std::to_string(req->rank())));
  }
  if (req->attempt() < 0 || req->attempt() > job->attempt) {
    return ToGrpcStatus(InvalidArgument("attempt: job " + job->id + " has attempts 1.." +
                                        std::to_string(job->attempt) + ", got " +
                                        std::to_string(req->attempt())));
  }
  const bool follow_attempts = req->attempt() == 0;
  int attempt = req->attempt() == 0 ? job->attempt : req->attempt();
  int64_t offset = -1;  // -1: not opened yet
  uint64_t version = 0;
  while (!ctx->IsCancelled()) {
    job = store->GetJob(req->job_id());
    if (!job.ok()) return ToGrpcStatus(job.status());
    if (attempt == 0 && job->attempt > 0) attempt = job->attempt;
    bool at_eof = true;
    if (attempt > 0) {
      const std::string path = job->job_dir + "/logs/attempt-" + std::to_string(attempt) +
                               "/rank-" + std::to_string(req->rank()) + ".log";
      std::ifstream in(path, std::ios::binary);
      if (in) {
        in.seekg(0, std::ios::end);
        const int64_t size = in.tellg();
        if (offset < 0)
          offset = req->tail_bytes() > 0 ? std::max<int64_t>(0, size - req->tail_bytes()) : 0;
        if (size < offset) offset = 0;  // truncated
        if (size > offset) {
          at_eof = false;
          in.seekg(offset);
          std::string buf(std::min<int64_t>(size - offset, kLogChunkBytes), '\0');
          in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
          buf.resize(static_cast<size_t>(in.gcount()));
          offset += static_cast<int64_t>(buf.size());
          v1::LogChunk chunk;
          chunk.set_attempt(attempt);
          chunk.set_rank(req->rank());
          chunk.set_data(buf);
          if (!writer->Write(chunk)) return grpc::Status::OK;
        }
      } else if (!req->follow()) {
        return ToGrpcStatus(NotFound("no log for job " + job->id + " attempt " +
                                     std::to_string(attempt) + " rank " +
                                     std::to_string(req->rank()) + " (" + path + ")"));
      }
    } else if (!req->follow()) {
      return ToGrpcStatus(
          NotFound("job " + job->id + " has not started yet (" + JobStateName(job->state) + ")"));
    }
    if (!at_eof) continue;
    if (follow_attempts && job->attempt > attempt) {
      attempt = job->attempt;  // a restart or resume: continue with the next attempt's log
      offset = 0;
      v1::LogChunk banner;
      banner.set_attempt(attempt);
      banner.set_rank(req->rank());
      banner.set_data("==> attempt " + std::to_string(attempt) + " <==\n");
      if (!writer->Write(banner)) return grpc::Status::OK;
      continue;
    }
    if (!req->follow()) return grpc::Status::OK;
    // Ends exactly at the terminal state: the last bytes were read after it was recorded.
    if (IsTerminal(job->state) || job->state == JobState::kPaused) return grpc::Status::OK;
    supervisor_->WaitForChange(&version, 250);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListCheckpoints(grpc::ServerContext* ctx,
                                             const v1::ListCheckpointsRequest* req,
                                             v1::ListCheckpointsResponse* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  Store* store = supervisor_->store();
  auto job = store->GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  std::string root = job->job_dir + "/checkpoints";
  if (auto spec = ParseJobSpec(job->spec_yaml); spec.ok() && !spec->checkpoint.dir.empty()) {
    root = spec->checkpoint.dir;
  }
  // Disk is the truth for what exists (retention deletes); the store adds who wrote it, when.
  std::map<int64_t, v1::Checkpoint> by_step;
  auto reported = store->ListCheckpoints(req->job_id());
  if (reported.ok()) {
    for (const CheckpointRecord& c : reported.value()) {
      v1::Checkpoint& out = by_step[c.step];
      out.set_step(c.step);
      out.set_path(c.path);
      out.set_size_bytes(c.size_bytes);
      out.set_created_at(c.created_at);
      out.set_attempt(c.attempt);
    }
  }
  auto on_disk = adctl::ListCheckpoints(root);
  if (on_disk.ok()) {
    for (const CheckpointInfo& c : on_disk.value()) {
      v1::Checkpoint& out = by_step[c.step];
      out.set_step(c.step);
      out.set_path(c.path);
      out.set_size_bytes(c.bytes);
      out.set_on_disk(true);
    }
  }
  for (auto& [step, c] : by_step) *resp->add_checkpoints() = c;
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListEvents(grpc::ServerContext* ctx, const v1::ListEventsRequest* req,
                                        v1::ListEventsResponse* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  auto job = supervisor_->store()->GetJob(req->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  auto events =
      supervisor_->store()->ListEvents(req->job_id(), req->after_event_id(), req->limit());
  if (!events.ok()) return ToGrpcStatus(events.status());
  for (const EventRecord& e : events.value()) EventToProto(e, resp->add_events());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListDevices(grpc::ServerContext* ctx,
                                         const v1::ListDevicesRequest* /*req*/,
                                         v1::ListDevicesResponse* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(CheckToken(ctx));
  for (const DeviceStatus& d : supervisor_->Devices()) {
    v1::Device* out = resp->add_devices();
    out->set_name(d.device.name);
    out->set_kind(d.device.kind);
    out->set_model(d.device.model);
    out->set_uuid(d.device.uuid);
    out->set_memory_total_bytes(d.device.memory_total_bytes);
    out->set_memory_used_bytes(d.device.memory_used_bytes);
    out->set_job_id(d.job_id);
  }
  return grpc::Status::OK;
}

}  // namespace adctl
