// The checkpoint and sample value lists (common/record_values.h) against the messages they
// convert to: every listed name is a field of v1::Checkpoint / v1::Sample with the member's type,
// every other field is one adctld sets, and a record survives proto → record → store → record →
// proto unchanged (what a rank reports is what `adctl ckpt list` and the page show).
#include "proto/record_values.h"

#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>

#include "server/api/convert.h"
#include "tests/testing/temp_store.h"

namespace adctl {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

template <typename T>
FieldDescriptor::CppType CppTypeOf() {
  if constexpr (std::is_same_v<T, double>) return FieldDescriptor::CPPTYPE_DOUBLE;
  if constexpr (std::is_same_v<T, int64_t>) return FieldDescriptor::CPPTYPE_INT64;
  if constexpr (std::is_same_v<T, int32_t>) return FieldDescriptor::CPPTYPE_INT32;
  return FieldDescriptor::CPPTYPE_STRING;
}

// Checks `for_each`'s names against `d`; the message's other fields must be `set_by_adctld`.
template <typename Values, typename ForEach>
void ExpectListCovers(ForEach for_each, const Descriptor* d,
                      const std::set<std::string>& set_by_adctld) {
  std::set<std::string> listed;
  Values values;
  for_each(values, [&](const char* name, auto& v) {
    listed.insert(name);
    const FieldDescriptor* f = d->FindFieldByName(name);
    ASSERT_NE(f, nullptr) << name << " is not a " << d->name() << " field";
    EXPECT_EQ(f->cpp_type(), CppTypeOf<std::decay_t<decltype(v)>>()) << name;
    EXPECT_FALSE(f->is_repeated()) << name;
  });
  for (int i = 0; i < d->field_count(); ++i) {
    const std::string name = d->field(i)->name();
    EXPECT_TRUE(listed.count(name) || set_by_adctld.count(name))
        << d->name() << "." << name << " is in neither the value list nor adctld's fields";
    EXPECT_FALSE(listed.count(name) && set_by_adctld.count(name)) << name << " is in both";
  }
}

TEST(RecordValuesTest, TheListsCoverTheirMessages) {
  ExpectListCovers<CheckpointValues>(kCheckpointValues, v1::Checkpoint::descriptor(),
                                     {"created_at", "attempt", "on_disk", "pinned"});
  ExpectListCovers<SampleValues>(kSampleValues, v1::Sample::descriptor(),
                                 {"attempt", "created_at", "on_disk"});
}

// Distinct values in every listed field of `msg`.
template <typename Values, typename ForEach>
void FillListedFields(ForEach for_each, google::protobuf::Message* msg) {
  const google::protobuf::Reflection* r = msg->GetReflection();
  const Descriptor* d = msg->GetDescriptor();
  int seed = 3;
  Values probe;
  for_each(probe, [&](const char* name, auto& v) {
    const FieldDescriptor* f = d->FindFieldByName(name);
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, double>) {
      r->SetDouble(msg, f, seed++ + 0.5);
    } else if constexpr (std::is_same_v<T, int64_t>) {
      r->SetInt64(msg, f, 7000 + seed++);
    } else if constexpr (std::is_same_v<T, int32_t>) {
      r->SetInt32(msg, f, seed++);
    } else {
      r->SetString(msg, f, std::string(name) + "-" + std::to_string(seed++));
    }
  });
}

class RecordRoundTripTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenTestStore(tmp_);
    JobRecord job;
    job.id = "j-1";
    job.name = "t";
    job.spec_yaml = "name: t\n";
    job.token = "x";
    job.job_dir = tmp_.path();
    ASSERT_TRUE(store_->InsertJob(job).ok());
  }
  TempDir tmp_;
  std::unique_ptr<Store> store_;
};

TEST_F(RecordRoundTripTest, ACheckpointReportReadsBackAsSent) {
  v1::Checkpoint in;
  FillListedFields<CheckpointValues>(kCheckpointValues, &in);
  in.set_attempt(2);
  in.set_created_at(1234.5);

  CheckpointRecord c;
  ValuesFromProto(in, kCheckpointValues, &c);
  c.job_id = "j-1";
  c.attempt = in.attempt();
  c.created_at = in.created_at();
  ASSERT_TRUE(store_->AddCheckpoint(c).ok());
  auto stored = store_->ListCheckpoints("j-1");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_EQ(stored->size(), 1u);

  CheckpointView view;
  static_cast<CheckpointValues&>(view) = stored->front();
  view.attempt = stored->front().attempt;
  view.created_at = stored->front().created_at;
  v1::Checkpoint out;
  CheckpointToProto(view, &out);
  EXPECT_EQ(out.SerializeAsString(), in.SerializeAsString()) << out.DebugString();
}

TEST_F(RecordRoundTripTest, ASampleReportReadsBackAsSent) {
  v1::Sample in;
  FillListedFields<SampleValues>(kSampleValues, &in);
  in.set_attempt(1);
  in.set_created_at(99.25);

  SampleRecord s = SampleFromProto(in);
  s.job_id = "j-1";
  ASSERT_TRUE(store_->AddSamples({s}).ok());
  auto stored = store_->ListSamples("j-1", 0);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_EQ(stored->size(), 1u);

  v1::Sample out;
  SampleToProto(SampleView{stored->front(), false}, &out);
  EXPECT_EQ(out.SerializeAsString(), in.SerializeAsString()) << out.DebugString();
}

}  // namespace
}  // namespace adctl
