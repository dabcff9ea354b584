// The one place where adctl::Status becomes a grpc::Status (and back, for clients).
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/status.h"

namespace adctl {

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

// In a gRPC handler: returns the grpc::Status of `expr` unless it is ok.
#define ADCTL_GRPC_RETURN_IF_ERROR(expr)                      \
  do {                                                        \
    ::adctl::Status _status = (expr);                         \
    if (!_status.ok()) return ::adctl::ToGrpcStatus(_status); \
  } while (0)

}  // namespace adctl
