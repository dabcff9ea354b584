#include "server/grpc/job_service.h"

#include <algorithm>
#include <fstream>
#include <optional>

#include "proto/grpc_status.h"
#include "server/api/convert.h"

namespace adctl {

namespace {

Status RequireJobId(const std::string& id) {
  if (id.empty()) return InvalidArgument("job_id: required");
  return Status::Ok();
}

constexpr size_t kLogChunkBytes = 64 * 1024;

}  // namespace

std::string AuthorizationOf(const grpc::ServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

AccessDecision CheckGrpcCaller(const grpc::ServerContext* ctx, const AccessPolicy& access,
                               Role needed) {
  if (access.client_certificate_required()) {
    const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    if (auth == nullptr || !auth->IsPeerAuthenticated()) {
      AccessDecision d;
      d.kind = AccessDecision::Kind::kUnauthenticated;
      d.message =
          "no client certificate: this adctld requires one signed by its --tls-client-ca (adctl: "
          "ADCTL_TLS_CERT and ADCTL_TLS_KEY, or tls_cert: and tls_key: in "
          "~/.config/adctl/config.yaml)";
      return d;
    }
  }
  return access.CheckAuthorization(AuthorizationOf(ctx), needed);
}

grpc::Status JobServiceImpl::Authorize(grpc::ServerContext* ctx, Role needed,
                                       Requester* who) const {
  const AccessDecision d = CheckGrpcCaller(ctx, *access_, needed);
  switch (d.kind) {
    case AccessDecision::Kind::kAllowed:
      // Without tokens the only callers are adctld's user's (its Unix socket): "owner".
      if (who != nullptr) *who = Requester(access_->enabled() ? d.who : "owner", d.own_jobs_only);
      return grpc::Status::OK;
    case AccessDecision::Kind::kUnauthenticated:
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, d.message);
    case AccessDecision::Kind::kDenied:
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, d.message);
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, "access check");
}

#define ADCTL_AUTHORIZE(ctx, role)                   \
  do {                                               \
    grpc::Status authorized_ = Authorize(ctx, role); \
    if (!authorized_.ok()) return authorized_;       \
  } while (0)

// The same, naming the caller in `who` (a command's events say who made it).
#define ADCTL_AUTHORIZE_AS(ctx, role, who)                 \
  do {                                                     \
    grpc::Status authorized_ = Authorize(ctx, role, &who); \
    if (!authorized_.ok()) return authorized_;             \
  } while (0)

Result<v1::Job> JobServiceImpl::LoadJob(const std::string& job_id, bool with_ranks) const {
  auto view = queries_->GetJob(job_id, with_ranks);
  if (!view.ok()) return view.status();
  v1::Job out;
  JobViewToProto(view.value(), &out);
  return out;
}

// The answer of a command on one job (cancel, pause, resume).
static grpc::Status JobReply(const Result<JobRecord>& job, v1::Job* resp) {
  if (!job.ok()) return ToGrpcStatus(job.status());
  JobToProto(job.value(), "", resp);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                                       v1::SubmitJobResponse* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kSubmitter, who);
  if (req->spec_yaml().empty()) {
    return ToGrpcStatus(InvalidArgument("spec_yaml: required (the job spec file's text)"));
  }
  SubmitRequest r;
  r.spec_yaml = req->spec_yaml();
  r.overrides.assign(req->overrides().begin(), req->overrides().end());
  if (req->has_gpus()) r.gpus = req->gpus();
  if (req->has_priority()) r.priority = req->priority();
  r.submission_id = req->submission_id();
  r.after.assign(req->after().begin(), req->after().end());
  r.after_any = req->after_any();
  for (const auto& label : req->labels()) r.labels[label.first] = label.second;
  r.webhooks.assign(req->webhooks().begin(), req->webhooks().end());
  r.by = who.name;
  if (req->dry_run()) {
    auto plan = jobs_->Plan(r);
    if (!plan.ok()) return ToGrpcStatus(plan.status());
    PlanToProto(*plan, resp->mutable_plan());
    return grpc::Status::OK;
  }
  auto submitted = jobs_->Submit(r);
  if (!submitted.ok()) return ToGrpcStatus(submitted.status());
  JobToProto(submitted->first, jobs_->WaitReason(submitted->first.id), resp->mutable_job());
  resp->set_created(submitted->second);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                                    v1::Job* resp) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  auto job = LoadJob(req->job_id(), /*with_ranks=*/true);
  if (!job.ok()) return ToGrpcStatus(job.status());
  *resp = job.value();
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                                      v1::ListJobsResponse* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kViewer, who);
  JobSelector selector;
  for (const auto& label : req->labels()) selector.labels[label.first] = label.second;
  if (req->mine()) selector.submitted_by = who.name;
  std::vector<JobState> states;
  for (int s : req->states()) {
    if (s < static_cast<int>(JobState::kQueued) || s > static_cast<int>(JobState::kCancelled)) {
      return ToGrpcStatus(InvalidArgument("states: unknown state " + std::to_string(s)));
    }
    states.push_back(static_cast<JobState>(s));
  }
  auto page = queries_->ListJobPage(states, req->page_size(), req->page_token(), selector);
  if (!page.ok()) return ToGrpcStatus(page.status());
  for (const JobView& j : page->jobs) JobViewToProto(j, resp->add_jobs());
  resp->set_next_page_token(page->next_page_token);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                                       v1::Job* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kSubmitter, who);
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  // The grace period's range is JobManager's (the HTTP side's too).
  std::optional<double> grace;
  if (req->has_grace_seconds()) grace = req->grace_seconds();
  return JobReply(jobs_->Cancel(req->job_id(), grace, req->force(), who), resp);
}

grpc::Status JobServiceImpl::PauseJob(grpc::ServerContext* ctx, const v1::PauseJobRequest* req,
                                      v1::Job* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kSubmitter, who);
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  std::optional<double> grace;
  if (req->has_grace_seconds()) grace = req->grace_seconds();
  return JobReply(jobs_->Pause(req->job_id(), grace, who), resp);
}

grpc::Status JobServiceImpl::ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req,
                                       v1::Job* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kSubmitter, who);
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  std::optional<int> gpus;
  if (req->has_gpus()) gpus = req->gpus();
  return JobReply(jobs_->Resume(req->job_id(), gpus, who), resp);
}

grpc::Status JobServiceImpl::SetJobPriority(grpc::ServerContext* ctx,
                                            const v1::SetJobPriorityRequest* req, v1::Job* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kSubmitter, who);
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  return JobReply(jobs_->SetPriority(req->job_id(), req->priority(), who), resp);
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                                      grpc::ServerWriter<v1::JobUpdate>* writer) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  auto cursor = queries_->StartWatch(req->job_id(), req->after_event_id());
  if (!cursor.ok()) return ToGrpcStatus(cursor.status());
  // The job as it is first, so a client knows where it stands before any event or metric.
  std::string last_snapshot;
  {
    auto job = LoadJob(req->job_id(), /*with_ranks=*/false);  // as Watch's snapshots are
    if (!job.ok()) return ToGrpcStatus(job.status());
    v1::JobUpdate u;
    *u.mutable_job() = std::move(job.value());
    last_snapshot = u.job().SerializeAsString();
    if (!writer->Write(u)) return grpc::Status::OK;
  }
  uint64_t version = 0;
  while (!ctx->IsCancelled()) {
    auto batch = queries_->Watch(req->job_id(), &cursor.value());
    if (!batch.ok()) return ToGrpcStatus(batch.status());
    for (const EventRecord& e : batch->events) {
      v1::JobUpdate u;
      EventToProto(e, u.mutable_event());
      if (!writer->Write(u)) return grpc::Status::OK;
    }
    for (const MetricRecord& m : batch->metrics) {
      v1::JobUpdate u;
      MetricToProto(m, u.mutable_metric());
      if (!writer->Write(u)) return grpc::Status::OK;
    }
    v1::JobUpdate u;
    JobViewToProto(batch->job, u.mutable_job());
    std::string snapshot = u.job().SerializeAsString();
    if (snapshot != last_snapshot) {
      if (!writer->Write(u)) return grpc::Status::OK;
      last_snapshot = snapshot;
    }
    // A full batch: more points wait behind the cursor, sent before the stream ends.
    if (batch->metrics.size() >= static_cast<size_t>(kMaxWatchBatchPoints)) continue;
    if (IsTerminal(batch->job.job.state)) return grpc::Status::OK;
    queries_->WaitForChange(&version, 1000);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::StreamLogs(grpc::ServerContext* ctx, const v1::StreamLogsRequest* req,
                                        grpc::ServerWriter<v1::LogChunk>* writer) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  if (req->tail_bytes() < 0) {
    return ToGrpcStatus(InvalidArgument("tail_bytes: must be >= 0 (0: from the beginning), got " +
                                        std::to_string(req->tail_bytes())));
  }
  auto view = queries_->GetJob(req->job_id(), /*with_ranks=*/false);
  if (!view.ok()) return ToGrpcStatus(view.status());
  ADCTL_GRPC_RETURN_IF_ERROR(JobQueries::CheckRankLogRef(view->job, req->attempt(), req->rank()));
  const bool follow_attempts = req->attempt() == 0;
  int attempt = req->attempt() == 0 ? view->job.attempt : req->attempt();
  int64_t offset = -1;  // -1: not opened yet
  if (req->resume_attempt() > 0) {
    if (req->resume_offset() < 0) {
      return ToGrpcStatus(InvalidArgument("resume_offset: must be >= 0"));
    }
    ADCTL_GRPC_RETURN_IF_ERROR(
        JobQueries::CheckRankLogRef(view->job, req->resume_attempt(), req->rank()));
    attempt = req->resume_attempt();
    offset = req->resume_offset();
  }
  uint64_t version = 0;
  while (!ctx->IsCancelled()) {
    view = queries_->GetJob(req->job_id(), /*with_ranks=*/false);
    if (!view.ok()) return ToGrpcStatus(view.status());
    const JobRecord& job = view->job;
    if (attempt == 0 && job.attempt > 0) attempt = job.attempt;
    bool at_eof = true;
    if (attempt > 0) {
      // Opened first (offset -1): from the start, or its last tail_bytes.
      LogRead read = queries_->ReadRankLog(job, attempt, req->rank(), offset, kLogChunkBytes,
                                           offset < 0 ? req->tail_bytes() : 0);
      if (read.exists) {
        offset = read.offset;
        if (!read.data.empty()) {
          at_eof = false;
          offset += static_cast<int64_t>(read.data.size());
          v1::LogChunk chunk;
          chunk.set_attempt(attempt);
          chunk.set_rank(req->rank());
          chunk.set_data(std::move(read.data));
          chunk.set_next_offset(offset);
          if (!writer->Write(chunk)) return grpc::Status::OK;
        }
      } else if (!req->follow()) {
        return ToGrpcStatus(NotFound("no log for job " + job.id + " attempt " +
                                     std::to_string(attempt) + " rank " +
                                     std::to_string(req->rank()) + " (" +
                                     queries_->RankLogPath(job, attempt, req->rank()) + ")"));
      }
    } else if (!req->follow()) {
      return ToGrpcStatus(
          NotFound("job " + job.id + " has not started yet (" + JobStateName(job.state) + ")"));
    }
    if (!at_eof) continue;
    if (follow_attempts && job.attempt > attempt) {
      attempt = job.attempt;  // a restart or resume: continue with the next attempt's log
      offset = 0;
      v1::LogChunk banner;
      banner.set_attempt(attempt);
      banner.set_rank(req->rank());
      banner.set_data("==> attempt " + std::to_string(attempt) + " <==\n");
      if (!writer->Write(banner)) return grpc::Status::OK;
      continue;
    }
    if (!req->follow()) return grpc::Status::OK;
    // Ends exactly at the terminal state: the last bytes were read after it was recorded. A
    // paused job is not over: following goes on into the attempt its resume starts.
    if (IsTerminal(job.state)) return grpc::Status::OK;
    queries_->WaitForChange(&version, 250);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListCheckpoints(grpc::ServerContext* ctx,
                                             const v1::ListCheckpointsRequest* req,
                                             v1::ListCheckpointsResponse* resp) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  auto checkpoints = queries_->ListCheckpoints(req->job_id());
  if (!checkpoints.ok()) return ToGrpcStatus(checkpoints.status());
  for (const CheckpointView& c : checkpoints.value()) CheckpointToProto(c, resp->add_checkpoints());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::PinCheckpoint(grpc::ServerContext* ctx,
                                           const v1::PinCheckpointRequest* req,
                                           v1::PinCheckpointResponse* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kSubmitter, who);
  ADCTL_GRPC_RETURN_IF_ERROR(RequireJobId(req->job_id()));
  auto pins = jobs_->PinCheckpoint(req->job_id(), req->step(), req->pin(), who);
  if (!pins.ok()) return ToGrpcStatus(pins.status());
  for (int64_t step : *pins) resp->add_pinned_steps(step);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListEvents(grpc::ServerContext* ctx, const v1::ListEventsRequest* req,
                                        v1::ListEventsResponse* resp) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  auto events = queries_->ListEvents(req->job_id(), req->after_event_id(), req->limit());
  if (!events.ok()) return ToGrpcStatus(events.status());
  for (const EventRecord& e : events.value()) EventToProto(e, resp->add_events());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListSamples(grpc::ServerContext* ctx,
                                         const v1::ListSamplesRequest* req,
                                         v1::ListSamplesResponse* resp) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  auto samples = queries_->ListSamples(req->job_id(), req->step());
  if (!samples.ok()) return ToGrpcStatus(samples.status());
  for (const SampleView& s : samples.value()) SampleToProto(s, resp->add_samples());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ExportMotionModules(grpc::ServerContext* ctx,
                                                 const v1::ExportMotionModulesRequest* req,
                                                 v1::ExportMotionModulesResponse* resp) {
  Requester who;
  ADCTL_AUTHORIZE_AS(ctx, Role::kSubmitter, who);
  auto exported = exports_->Export(req->job_id(), req->step(), req->format(), who, req->weights());
  if (!exported.ok()) return ToGrpcStatus(exported.status());
  MotionExportToProto(exported.value(), resp);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListExports(grpc::ServerContext* ctx,
                                         const v1::ListExportsRequest* req,
                                         v1::ListExportsResponse* resp) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  auto exports = exports_->List(req->job_id());
  if (!exports.ok()) return ToGrpcStatus(exports.status());
  for (const MotionExport& e : exports.value()) ExportToProto(e, resp->add_exports());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ReadArtifact(grpc::ServerContext* ctx,
                                          const v1::ReadArtifactRequest* req,
                                          grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  auto artifact = queries_->Artifact(req->job_id(), req->path());
  if (!artifact.ok()) return ToGrpcStatus(artifact.status());
  std::ifstream in(artifact->path, std::ios::binary);
  if (!in) return ToGrpcStatus(NotFound(req->path() + ": cannot be opened"));
  constexpr size_t kChunk = 1 << 20;
  v1::ArtifactChunk chunk;
  chunk.set_size_bytes(artifact->size_bytes);
  std::string buffer(kChunk, '\0');
  bool first = true;
  while (!ctx->IsCancelled()) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0 && !first) break;
    chunk.set_data(buffer.data(), got);
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client gone");
    chunk.clear_size_bytes();
    first = false;
    if (got < kChunk) break;
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListDevices(grpc::ServerContext* ctx,
                                         const v1::ListDevicesRequest* /*req*/,
                                         v1::ListDevicesResponse* resp) {
  ADCTL_AUTHORIZE(ctx, Role::kViewer);
  for (const DeviceStatus& d : queries_->Devices()) DeviceToProto(d, resp->add_devices());
  return grpc::Status::OK;
}

}  // namespace adctl
