// The one metric field list (ForEachMetricValue) against the proto it converts to: every
// measured MetricPoint field is in the list, with the same type, and a point survives
// proto → record → store → record → proto unchanged.
#include "server/api/convert.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>

#include "tests/testing/temp_store.h"

namespace adctl {
namespace {

using google::protobuf::FieldDescriptor;

TEST(ConvertTest, MetricFieldListCoversEveryMeasuredProtoField) {
  std::set<std::string> listed;
  MetricRecord m;
  ForEachMetricValue(m, [&](const char* name, auto& v) {
    listed.insert(name);
    const FieldDescriptor* f = v1::MetricPoint::descriptor()->FindFieldByName(name);
    ASSERT_NE(f, nullptr) << name << " is not a MetricPoint field";
    const bool is_double = std::is_same_v<std::decay_t<decltype(v)>, double>;
    EXPECT_EQ(f->cpp_type(),
              is_double ? FieldDescriptor::CPPTYPE_DOUBLE : FieldDescriptor::CPPTYPE_INT64)
        << name;
  });
  // Identity and derived fields are set by adctld, not measured.
  // eval_by_timestep is a list, converted beside the list (proto/metric_point.cc).
  const std::set<std::string> not_measured = {"job_id", "attempt", "rank", "eta_seconds",
                                              "eval_by_timestep"};
  const google::protobuf::Descriptor* d = v1::MetricPoint::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string name = d->field(i)->name();
    if (not_measured.count(name)) continue;
    EXPECT_TRUE(listed.count(name)) << name << " is missing from ForEachMetricValue";
  }
}

TEST(ConvertTest, MetricPointRoundTripsThroughTheStore) {
  v1::MetricPoint in;
  const google::protobuf::Reflection* r = in.GetReflection();
  int seed = 1;
  MetricRecord probe;
  ForEachMetricValue(probe, [&](const char* name, auto& v) {
    const FieldDescriptor* f = v1::MetricPoint::descriptor()->FindFieldByName(name);
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>) {
      r->SetDouble(&in, f, seed++ + 0.25);
    } else {
      r->SetInt64(&in, f, 1000 + seed++);
    }
  });
  in.set_total_steps(10'000);  // > step, so the ETA is defined

  const TempDir tmp;
  const std::string dir = tmp.path();
  auto store = OpenTestStore(tmp);
  JobRecord job;
  job.id = "j-1";
  job.name = "t";
  job.spec_yaml = "name: t\n";
  job.token = "x";
  job.job_dir = dir;
  ASSERT_TRUE(store->InsertJob(job).ok());
  MetricRecord m = MetricFromProto(in);
  m.job_id = "j-1";
  m.attempt = 1;
  m.rank = 2;
  ASSERT_TRUE(store->AddMetrics({m}).ok());
  auto stored = store->ListMetrics("j-1", 0);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);

  v1::MetricPoint out;
  MetricToProto(stored->front(), &out);
  EXPECT_EQ(out.job_id(), "j-1");
  EXPECT_EQ(out.attempt(), 1);
  EXPECT_EQ(out.rank(), 2);
  EXPECT_DOUBLE_EQ(out.eta_seconds(), (in.total_steps() - in.step()) * in.step_seconds());
  out.clear_job_id();
  out.clear_attempt();
  out.clear_rank();
  out.clear_eta_seconds();
  EXPECT_EQ(out.SerializeAsString(), in.SerializeAsString()) << out.DebugString();
}

// The ETA adds the validations still to render, each as long as the latest one took; a job
// without validation_seconds yet (or a finished one) gets the steps' time only.
TEST(ConvertTest, EtaCountsTheValidationsToCome) {
  JobRecord job;
  job.id = "j-1";
  job.state = JobState::kRunning;
  job.spec_yaml =
      "name: eta\nmodel: {pretrained: /m/sd}\ndata: {kind: synthetic}\ntrain: {max_steps: 20}\n"
      "validation: {prompts: [\"a cat\"], every_steps: 5, at_steps: [12]}\n";
  ASSERT_TRUE(ParseJobSpec(job.spec_yaml).ok()) << ParseJobSpec(job.spec_yaml).status().ToString();
  job.progress.step = 10;
  job.progress.total_steps = 20;
  job.progress.step_seconds = 1;
  v1::Job out;
  JobToProto(job, "", &out);
  EXPECT_DOUBLE_EQ(out.progress().eta_seconds(), 10);
  job.progress.validation_seconds = 3;  // renders at 12, 15 and 20 are to come
  JobToProto(job, "", &out);
  EXPECT_DOUBLE_EQ(out.progress().eta_seconds(), 10 + 3 * 3);
  EXPECT_DOUBLE_EQ(out.progress().validation_seconds(), 3);
  job.state = JobState::kSucceeded;
  v1::Job done;
  JobToProto(job, "", &done);
  EXPECT_EQ(done.progress().eta_seconds(), 0);
}

}  // namespace
}  // namespace adctl
