// MetricValues (common/metric_values.h) to and from v1::MetricPoint: the one conversion, field
// by field name through ForEachMetricValue, for the worker that sends points and adctld that
// stores and serves them.
#pragma once

#include "adctl/v1/job_service.pb.h"
#include "common/metric_values.h"

namespace adctl {

// Sets every measured field of `out`; leaves job_id, attempt, rank and eta_seconds alone.
void MetricValuesToProto(const MetricValues& m, v1::MetricPoint* out);
void MetricValuesFromProto(const v1::MetricPoint& p, MetricValues* m);

}  // namespace adctl
