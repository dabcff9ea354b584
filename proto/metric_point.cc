#include "proto/metric_point.h"

#include <google/protobuf/descriptor.h>

#include <type_traits>

namespace adctl {
namespace {

// The MetricPoint field of one ForEachMetricValue entry (same name; checked by convert_test).
const google::protobuf::FieldDescriptor* MetricField(const char* name) {
  return v1::MetricPoint::descriptor()->FindFieldByName(name);
}

}  // namespace

void MetricValuesToProto(const MetricValues& m, v1::MetricPoint* out) {
  const google::protobuf::Reflection* reflection = out->GetReflection();
  ForEachMetricValue(m, [&](const char* name, const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) {
      reflection->SetDouble(out, MetricField(name), v);
    } else {
      reflection->SetInt64(out, MetricField(name), v);
    }
  });
  out->clear_eval_by_timestep();
  for (const auto& [t, loss] : m.eval_by_timestep) {
    auto* e = out->add_eval_by_timestep();
    e->set_timestep(t);
    e->set_loss(loss);
  }
}

void MetricValuesFromProto(const v1::MetricPoint& p, MetricValues* m) {
  const google::protobuf::Reflection* reflection = p.GetReflection();
  ForEachMetricValue(*m, [&](const char* name, auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) {
      v = reflection->GetDouble(p, MetricField(name));
    } else {
      v = reflection->GetInt64(p, MetricField(name));
    }
  });
  m->eval_by_timestep.clear();
  for (const auto& e : p.eval_by_timestep())
    m->eval_by_timestep.emplace_back(e.timestep(), e.loss());
}

}  // namespace adctl
