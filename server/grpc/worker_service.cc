#include "server/grpc/worker_service.h"

#include <cstdio>
#include <fstream>

#include "common/job_layout.h"
#include "common/worker_contract.h"
#include "proto/grpc_status.h"
#include "proto/record_values.h"
#include "server/api/convert.h"
#include "server/auth/access_policy.h"
#include "server/grpc/job_service.h"

namespace adctl {

// Returns Check's refusal of a call (its token, its rank reference) from the handler.
#define ADCTL_RETURN_IF_REFUSED(check)   \
  do {                                   \
    grpc::Status checked_ = (check);     \
    if (!checked_.ok()) return checked_; \
  } while (0)

grpc::Status WorkerServiceImpl::Check(grpc::ServerContext* ctx, const v1::RankRef& ref) {
  // As JobService: no, a malformed or a wrong token is UNAUTHENTICATED; naming an attempt or
  // rank the job does not have is PERMISSION_DENIED.
  auto token = TokenOfAuthorization(AuthorizationOf(ctx));
  if (!token.ok()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, token.status().message());
  }
  if (token->empty()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "no token: a rank sends its own (ADCTL_TOKEN, as adctld launched it) as "
                        "'authorization: Bearer <token>'");
  }
  if (ref.job_id().empty()) return ToGrpcStatus(InvalidArgument("ref.job_id: required"));
  if (ref.attempt() < 1) return ToGrpcStatus(InvalidArgument("ref.attempt: must be >= 1"));
  if (ref.rank() < 0) return ToGrpcStatus(InvalidArgument("ref.rank: must be >= 0"));
  auto valid = hub_->Authorize(ref.job_id(), ref.attempt(), ref.rank(), token.value());
  if (!valid.ok()) return ToGrpcStatus(valid.status());
  if (!valid.value()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "job " + ref.job_id() + " attempt " + std::to_string(ref.attempt()) +
                            " rank " + std::to_string(ref.rank()) + ": wrong or missing token");
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::RegisterRank(grpc::ServerContext* ctx,
                                             const v1::RegisterRankRequest* req,
                                             v1::RegisterRankResponse* resp) {
  ADCTL_RETURN_IF_REFUSED(Check(ctx, req->ref()));
  ADCTL_GRPC_RETURN_IF_ERROR(hub_->RegisterRank(req->ref().job_id(), req->ref().attempt(),
                                                req->ref().rank(), req->world_size(), req->pid(),
                                                req->host()));
  resp->set_heartbeat_interval_ms(hub_->heartbeat_interval_ms());
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::KvSet(grpc::ServerContext* ctx, const v1::KvSetRequest* req,
                                      v1::KvSetResponse* /*resp*/) {
  ADCTL_RETURN_IF_REFUSED(Check(ctx, req->ref()));
  if (req->key().empty()) return ToGrpcStatus(InvalidArgument("key: required"));
  return ToGrpcStatus(
      hub_->KvSet(req->ref().job_id(), req->ref().attempt(), req->key(), req->value()));
}

grpc::Status WorkerServiceImpl::KvGet(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                                      v1::KvGetResponse* resp) {
  ADCTL_RETURN_IF_REFUSED(Check(ctx, req->ref()));
  if (req->key().empty()) return ToGrpcStatus(InvalidArgument("key: required"));
  auto value =
      hub_->KvGet(req->ref().job_id(), req->ref().attempt(), req->key(), req->timeout_ms());
  if (!value.ok()) return ToGrpcStatus(value.status());
  resp->set_found(value->has_value());
  if (value->has_value()) resp->set_value(**value);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                                          v1::HeartbeatResponse* resp) {
  ADCTL_RETURN_IF_REFUSED(Check(ctx, req->ref()));
  auto stop =
      hub_->Heartbeat(req->ref().job_id(), req->ref().attempt(), req->ref().rank(), req->pid());
  if (!stop.ok()) return ToGrpcStatus(stop.status());
  resp->set_stop(stop->first);
  resp->set_reason(stop->second);
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ReportMetrics(grpc::ServerContext* ctx,
                                              const v1::ReportMetricsRequest* req,
                                              v1::ReportMetricsResponse* /*resp*/) {
  ADCTL_RETURN_IF_REFUSED(Check(ctx, req->ref()));
  if (static_cast<size_t>(req->points_size()) > kMaxPointsPerReport) {
    return ToGrpcStatus(InvalidArgument(
        "ReportMetrics: " + std::to_string(req->points_size()) + " points in one call; at most " +
        std::to_string(kMaxPointsPerReport) + " (send a longer backlog in several calls)"));
  }
  std::vector<MetricRecord> points;
  for (const auto& p : req->points()) points.push_back(MetricFromProto(p));
  return ToGrpcStatus(hub_->ReportMetrics(req->ref().job_id(), req->ref().attempt(),
                                          req->ref().rank(), std::move(points)));
}

grpc::Status WorkerServiceImpl::ReportEvents(grpc::ServerContext* ctx,
                                             const v1::ReportEventsRequest* req,
                                             v1::ReportEventsResponse* /*resp*/) {
  ADCTL_RETURN_IF_REFUSED(Check(ctx, req->ref()));
  return ToGrpcStatus(DeliverEvents(req->ref(), req->events()));
}

Status WorkerServiceImpl::DeliverEvents(
    const v1::RankRef& ref, const google::protobuf::RepeatedPtrField<v1::WorkerEvent>& events) {
  for (const v1::WorkerEvent& e : events) {
    Status st;
    switch (e.kind()) {
      case v1::WorkerEvent::KIND_TRAINING_STARTED:
        st = hub_->ReportTrainingStarted(ref.job_id(), ref.attempt(), ref.rank(),
                                         e.resumed_from_step(), e.total_steps());
        break;
      case v1::WorkerEvent::KIND_CHECKPOINT: {
        CheckpointRecord c;
        ValuesFromProto(e.checkpoint(), kCheckpointValues, &c);
        c.created_at = e.time();
        st = hub_->ReportCheckpoint(ref.job_id(), ref.attempt(), ref.rank(), c);
        if (st.code() == StatusCode::kPermissionDenied) {
          // Not recorded, and said in the job's events; the batch's other events still count.
          st = hub_->ReportWorkerEvent(ref.job_id(), ref.attempt(), ref.rank(), "warning",
                                       "checkpoint report refused: " + st.message());
        }
        break;
      }
      case v1::WorkerEvent::KIND_SAMPLES: {
        std::vector<SampleRecord> samples;
        for (const v1::Sample& p : e.samples()) samples.push_back(SampleFromProto(p));
        st = hub_->ReportSamples(ref.job_id(), ref.attempt(), ref.rank(), std::move(samples),
                                 e.message());
        break;
      }
      default:
        st = hub_->ReportWorkerEvent(ref.job_id(), ref.attempt(), ref.rank(), e.level(),
                                     e.message());
        break;
    }
    ADCTL_RETURN_IF_ERROR(st);
  }
  return Status::Ok();
}

void WorkerServiceImpl::DeliverPendingReports(const std::string& job_dir, const std::string& job_id,
                                              int attempt, int world_size) {
  const JobLayout layout(job_dir);
  for (int rank = 0; rank < world_size; ++rank) {
    const std::string path = layout.rank_pending_reports(attempt, rank);
    std::ifstream in(path, std::ios::binary);
    if (!in) continue;  // none: everything was delivered
    const std::string who = "rank " + std::to_string(rank);
    v1::PendingReports pending;
    if (!pending.ParseFromIstream(&in) || pending.ref().job_id() != job_id ||
        pending.ref().attempt() != attempt || pending.ref().rank() != rank) {
      hub_->ReportWorkerEvent(job_id, attempt, rank, "warning",
                              who + "'s undelivered reports in " + path +
                                  " are not this rank's or cannot be read; left in place");
      continue;
    }
    std::vector<MetricRecord> points;
    Status st;
    for (int i = 0; i < pending.points_size() && st.ok(); ++i) {
      points.push_back(MetricFromProto(pending.points(i)));
      if (points.size() == kMaxPointsPerReport || i + 1 == pending.points_size()) {
        st = hub_->ReportMetrics(job_id, attempt, rank, std::move(points));
        points.clear();
      }
    }
    if (st.ok()) st = DeliverEvents(pending.ref(), pending.events());
    if (!st.ok()) {
      hub_->ReportWorkerEvent(job_id, attempt, rank, "warning",
                              who + "'s undelivered reports in " + path +
                                  " could not be taken: " + st.message() + "; left in place");
      continue;
    }
    in.close();
    std::remove(path.c_str());
    hub_->ReportWorkerEvent(job_id, attempt, rank, "info",
                            who + " could not send " + std::to_string(pending.points_size()) +
                                " metric point(s) and " + std::to_string(pending.events_size()) +
                                " event(s) before it ended; adctld took them from " + path);
  }
}

}  // namespace adctl
