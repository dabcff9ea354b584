// The one place where adctl::Status becomes a grpc::Status (and back, for clients).
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/status.h"

namespace adctl {

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

}  // namespace adctl
