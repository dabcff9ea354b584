#include "proto/json.h"

#include <google/protobuf/util/json_util.h>

namespace adctl {

std::string ToJson(const google::protobuf::Message& message, JsonLayout layout) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = layout == JsonLayout::kIndented;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

}  // namespace adctl
