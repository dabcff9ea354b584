// A proto message as JSON, the one way adctld's HTTP API and the CLI's `-o json` write it: proto
// field names, default values printed (a client sees every field, 0 and "" included).
#pragma once

#include <google/protobuf/message.h>

#include <string>

namespace adctl {

enum class JsonLayout { kCompact, kIndented };

std::string ToJson(const google::protobuf::Message& message,
                   JsonLayout layout = JsonLayout::kCompact);

}  // namespace adctl
