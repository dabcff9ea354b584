// Store records → adctl.v1 messages. Pure functions; used by the gRPC services and the HTTP
// JSON API (which prints the same messages as JSON).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "adctl/v1/job_service.pb.h"
#include "server/store/store.h"

namespace adctl {

void JobToProto(const JobRecord& job, const std::string& wait_reason, v1::Job* out);
void RanksToProto(const std::vector<RankRecord>& ranks, const std::map<int, bool>& alive,
                  v1::Job* out);
void EventToProto(const EventRecord& event, v1::Event* out);
void MetricToProto(const MetricRecord& metric, v1::MetricPoint* out);
MetricRecord MetricFromProto(const v1::MetricPoint& point);

}  // namespace adctl
