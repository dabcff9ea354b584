// adctl.v1.JobService: validate, call (JobManager for commands, JobQueries for reads,
// MotionExports for exports),
// convert (server/api/convert.h). Thread-safe (stateless; the access policy is immutable).
#pragma once

#include <string>

#include "adctl/v1/job_service.grpc.pb.h"
#include "server/api/job_queries.h"
#include "server/api/motion_exports.h"
#include "server/auth/access_policy.h"
#include "server/supervisor/job_manager.h"

namespace adctl {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `access`: every call carries `authorization: Bearer <token>` of a role that may make it
  // (reads: viewer; submit, cancel, pause, resume, export: submitter), unless it has no tokens.
  JobServiceImpl(JobManager* jobs, const JobQueries* queries, MotionExports* exports,
                 const AccessPolicy* access)
      : jobs_(jobs), queries_(queries), exports_(exports), access_(access) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override;
  grpc::Status GetJob(grpc::ServerContext* ctx, const v1::GetJobRequest* req,
                      v1::Job* resp) override;
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override;
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status PauseJob(grpc::ServerContext* ctx, const v1::PauseJobRequest* req,
                        v1::Job* resp) override;
  grpc::Status ResumeJob(grpc::ServerContext* ctx, const v1::ResumeJobRequest* req,
                         v1::Job* resp) override;
  grpc::Status SetJobPriority(grpc::ServerContext* ctx, const v1::SetJobPriorityRequest* req,
                              v1::Job* resp) override;
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobUpdate>* writer) override;
  grpc::Status StreamLogs(grpc::ServerContext* ctx, const v1::StreamLogsRequest* req,
                          grpc::ServerWriter<v1::LogChunk>* writer) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* ctx, const v1::ListCheckpointsRequest* req,
                               v1::ListCheckpointsResponse* resp) override;
  grpc::Status PinCheckpoint(grpc::ServerContext* ctx, const v1::PinCheckpointRequest* req,
                             v1::PinCheckpointResponse* resp) override;
  grpc::Status ListEvents(grpc::ServerContext* ctx, const v1::ListEventsRequest* req,
                          v1::ListEventsResponse* resp) override;
  grpc::Status ListDevices(grpc::ServerContext* ctx, const v1::ListDevicesRequest* req,
                           v1::ListDevicesResponse* resp) override;
  grpc::Status ListSamples(grpc::ServerContext* ctx, const v1::ListSamplesRequest* req,
                           v1::ListSamplesResponse* resp) override;
  grpc::Status ExportMotionModules(grpc::ServerContext* ctx,
                                   const v1::ExportMotionModulesRequest* req,
                                   v1::ExportMotionModulesResponse* resp) override;
  grpc::Status ListExports(grpc::ServerContext* ctx, const v1::ListExportsRequest* req,
                           v1::ListExportsResponse* resp) override;
  grpc::Status ReadArtifact(grpc::ServerContext* ctx, const v1::ReadArtifactRequest* req,
                            grpc::ServerWriter<v1::ArtifactChunk>* writer) override;

 private:
  // OK, UNAUTHENTICATED (no or unknown token) or PERMISSION_DENIED (a role too low). `who`
  // (optional): the caller's name when allowed (the token's, "owner" without tokens).
  grpc::Status Authorize(grpc::ServerContext* ctx, Role needed, Requester* who = nullptr) const;
  Result<v1::Job> LoadJob(const std::string& job_id, bool with_ranks) const;

  JobManager* const jobs_;
  const JobQueries* const queries_;
  MotionExports* const exports_;
  const AccessPolicy* const access_;
};

// The `authorization` metadata of a call as sent ("" when none); TokenOfAuthorization
// (server/auth/access_policy.h) reads the token from it.
std::string AuthorizationOf(const grpc::ServerContext* ctx);

// `access`'s decision on a gRPC caller: its bearer token and, when the policy requires one, its
// verified client certificate (mutual TLS). JobService and reflection ask this.
AccessDecision CheckGrpcCaller(const grpc::ServerContext* ctx, const AccessPolicy& access,
                               Role needed);

}  // namespace adctl
