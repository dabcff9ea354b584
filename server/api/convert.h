// Store records and read-side views → adctl.v1 messages, one function per record type. Pure
// functions; used by the gRPC services and the HTTP JSON API (which prints the same messages as
// JSON, ToJson).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "adctl/v1/job_service.pb.h"
#include "proto/json.h"  // ToJson, which the HTTP API prints these messages with
#include "server/api/job_queries.h"
#include "server/api/motion_exports.h"
#include "server/store/store.h"
#include "server/supervisor/job_manager.h"

namespace adctl {

// The one ETA: (total - step) × the latest step time; 0 when unknown or done.
double EtaSeconds(int64_t step, int64_t total_steps, double step_seconds);
void JobToProto(const JobRecord& job, const std::string& wait_reason, v1::Job* out);
void RanksToProto(const std::vector<RankRecord>& ranks, const std::map<int, bool>& alive,
                  v1::Job* out);
void EventToProto(const EventRecord& event, v1::Event* out);
void MetricToProto(const MetricRecord& metric, v1::MetricPoint* out);
MetricRecord MetricFromProto(const v1::MetricPoint& point);
// JobToProto, plus the ranks when the view has them.
void JobViewToProto(const JobView& view, v1::Job* out);
void CheckpointToProto(const CheckpointView& checkpoint, v1::Checkpoint* out);
void DeviceToProto(const DeviceStatus& device, v1::Device* out);
void SampleToProto(const SampleView& sample, v1::Sample* out);
SampleRecord SampleFromProto(const v1::Sample& sample);
void MotionExportToProto(const MotionExport& exported, v1::ExportMotionModulesResponse* out);
// One export of ListExports (and GET /api/v1/jobs/{id}/exports).
void ExportToProto(const MotionExport& exported, v1::Export* out);
// A dry run's plan; webhook URLs with their paths elided (RedactWebhookUrl).
void PlanToProto(const SubmitPlan& plan, v1::SubmitPlan* out);

}  // namespace adctl
