// adctl.v1.WorkerService over the WorkerHub: the calls adworker ranks make. Every call is
// checked against the rank's token (RankToken of its attempt). Also delivers what ranks kept
// in their job folder because adctld could not take it (PendingReports). Thread-safe
// (stateless).
#pragma once

#include "adctl/v1/worker_service.grpc.pb.h"
#include "server/supervisor/worker_hub.h"

namespace adctl {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  explicit WorkerServiceImpl(WorkerHub* hub) : hub_(hub) {}

  grpc::Status RegisterRank(grpc::ServerContext* ctx, const v1::RegisterRankRequest* req,
                            v1::RegisterRankResponse* resp) override;
  grpc::Status KvSet(grpc::ServerContext* ctx, const v1::KvSetRequest* req,
                     v1::KvSetResponse* resp) override;
  grpc::Status KvGet(grpc::ServerContext* ctx, const v1::KvGetRequest* req,
                     v1::KvGetResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status ReportMetrics(grpc::ServerContext* ctx, const v1::ReportMetricsRequest* req,
                             v1::ReportMetricsResponse* resp) override;
  grpc::Status ReportEvents(grpc::ServerContext* ctx, const v1::ReportEventsRequest* req,
                            v1::ReportEventsResponse* resp) override;

  // Takes the pending reports ranks 0..world_size-1 of `attempt` left in `job_dir` (the rank
  // spill files) as if they had been sent, says so in the job's events, and removes each file
  // taken. Call when the attempt's ranks are all gone (AttemptMonitor's attempt-ended hook).
  void DeliverPendingReports(const std::string& job_dir, const std::string& job_id, int attempt,
                             int world_size);

 private:
  // OK, UNAUTHENTICATED (no, a malformed or a wrong token), INVALID_ARGUMENT (the reference),
  // or WorkerHub::Authorize's error.
  grpc::Status Check(grpc::ServerContext* ctx, const v1::RankRef& ref);
  Status DeliverEvents(const v1::RankRef& ref,
                       const google::protobuf::RepeatedPtrField<v1::WorkerEvent>& events);

  WorkerHub* const hub_;
};

}  // namespace adctl
