// A value list (common/metric_values.h, common/record_values.h) to and from the proto message
// whose fields carry the same names: the one conversion of each record, field by field name
// through protobuf reflection, for the worker that sends records and adctld that stores and
// serves them. tests/server/convert_test.cc checks that every listed name is a field of the
// message with the member's type.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "adctl/v1/job_service.pb.h"
#include "common/metric_values.h"
#include "common/record_values.h"

namespace adctl {
namespace record_values_internal {

template <typename T>
void Set(google::protobuf::Message* out, const google::protobuf::FieldDescriptor* field,
         const T& v) {
  const google::protobuf::Reflection* r = out->GetReflection();
  if constexpr (std::is_same_v<T, double>) {
    r->SetDouble(out, field, v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    r->SetInt64(out, field, v);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    r->SetInt32(out, field, v);
  } else if constexpr (std::is_same_v<T, bool>) {
    r->SetBool(out, field, v);
  } else {
    static_assert(std::is_same_v<T, std::string>, "a value list member of an unhandled type");
    r->SetString(out, field, v);
  }
}

template <typename T>
void Get(const google::protobuf::Message& in, const google::protobuf::FieldDescriptor* field,
         T* v) {
  const google::protobuf::Reflection* r = in.GetReflection();
  if constexpr (std::is_same_v<T, double>) {
    *v = r->GetDouble(in, field);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    *v = r->GetInt64(in, field);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    *v = r->GetInt32(in, field);
  } else if constexpr (std::is_same_v<T, bool>) {
    *v = r->GetBool(in, field);
  } else {
    static_assert(std::is_same_v<T, std::string>, "a value list member of an unhandled type");
    *v = r->GetString(in, field);
  }
}

}  // namespace record_values_internal

// Sets the fields of `out` named by `for_each` (kCheckpointValues, ...) from `values`.
template <typename Values, typename ForEach>
void ValuesToProto(const Values& values, ForEach&& for_each, google::protobuf::Message* out) {
  const google::protobuf::Descriptor* d = out->GetDescriptor();
  for_each(values, [&](const char* name, const auto& v) {
    record_values_internal::Set(out, d->FindFieldByName(name), v);
  });
}

// Reads the fields named by `for_each` from `in` into `values`.
template <typename Values, typename ForEach>
void ValuesFromProto(const google::protobuf::Message& in, ForEach&& for_each, Values* values) {
  const google::protobuf::Descriptor* d = in.GetDescriptor();
  for_each(*values, [&](const char* name, auto& v) {
    record_values_internal::Get(in, d->FindFieldByName(name), &v);
  });
}

}  // namespace adctl
