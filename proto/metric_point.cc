#include "proto/metric_point.h"

#include "proto/record_values.h"

namespace adctl {

void MetricValuesToProto(const MetricValues& m, v1::MetricPoint* out) {
  ValuesToProto(m, kMetricValues, out);
  out->clear_eval_by_timestep();
  for (const auto& [t, loss] : m.eval_by_timestep) {
    auto* e = out->add_eval_by_timestep();
    e->set_timestep(t);
    e->set_loss(loss);
  }
}

void MetricValuesFromProto(const v1::MetricPoint& p, MetricValues* m) {
  ValuesFromProto(p, kMetricValues, m);
  m->eval_by_timestep.clear();
  for (const auto& e : p.eval_by_timestep())
    m->eval_by_timestep.emplace_back(e.timestep(), e.loss());
}

}  // namespace adctl
