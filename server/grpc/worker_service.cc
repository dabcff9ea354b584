#include "server/grpc/worker_service.h"

#include "common/worker_contract.h"
#include "proto/grpc_status.h"
#include "server/api/convert.h"
#include "server/grpc/job_service.h"

namespace adctl {

Status WorkerServiceImpl::Check(grpc::ServerContext* ctx, const v1::RankRef& ref) {
  if (ref.job_id().empty()) return InvalidArgument("ref.job_id: required");
  if (ref.attempt() < 1) return InvalidArgument("ref.attempt: must be >= 1");
  if (ref.rank() < 0) return InvalidArgument("ref.rank: must be >= 0");
  return hub_->Authorize(ref.job_id(), ref.attempt(), ref.rank(), BearerToken(ctx));
}

grpc::Status WorkerServiceImpl::RegisterRank(grpc::ServerContext* ctx,
                                             const v1::RegisterRankRequest* req,
                                             v1::RegisterRankResponse* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(Check(ctx, req->ref()));
  ADCTL_GRPC_RETURN_IF_ERROR(hub_->RegisterRank(req->ref().job_id(), req->ref().attempt(),
                                                req->ref().rank(), req->world_size(), req->pid(),
                                                req->host()));
  resp->set_heartbeat_interval_ms(hub_->heartbeat_interval_ms());
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::KvSet(grpc::ServerContext* ctx, const v1::KvSetRequest* req,
                                      v1::KvSetResponse* /*resp*/) {
  ADCTL_GRPC_RETURN_IF_ERROR(Check(ctx, req->ref()));
  if (req->key().empty()) return ToGrpcStatus(InvalidArgument("key: required"));
  return ToGrpcStatus(
      hub_->KvSet(req->ref().job_id(), req->ref().attempt(), req->key(), req->value()));
}

grpc::Status WorkerServiceImpl::KvGet(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                                      v1::KvGetResponse* resp) {
  ADCTL_GRPC_RETURN_IF_ERROR(Check(ctx, req->ref()));
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
  ADCTL_GRPC_RETURN_IF_ERROR(Check(ctx, req->ref()));
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
  ADCTL_GRPC_RETURN_IF_ERROR(Check(ctx, req->ref()));
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
  ADCTL_GRPC_RETURN_IF_ERROR(Check(ctx, req->ref()));
  const auto& ref = req->ref();
  for (const v1::WorkerEvent& e : req->events()) {
    Status st;
    switch (e.kind()) {
      case v1::WorkerEvent::KIND_TRAINING_STARTED:
        st = hub_->ReportTrainingStarted(ref.job_id(), ref.attempt(), ref.rank(),
                                         e.resumed_from_step(), e.total_steps());
        break;
      case v1::WorkerEvent::KIND_CHECKPOINT: {
        CheckpointRecord c;
        c.step = e.checkpoint().step();
        c.path = e.checkpoint().path();
        c.size_bytes = e.checkpoint().size_bytes();
        c.save_seconds = e.checkpoint().save_seconds();
        c.stall_seconds = e.checkpoint().stall_seconds();
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
    ADCTL_GRPC_RETURN_IF_ERROR(st);
  }
  return grpc::Status::OK;
}

}  // namespace adctl
