// A request gRPC cannot decode is the client's mistake: INVALID_ARGUMENT with a message.
//
// gRPC's generated handlers answer a request whose bytes do not parse as the method's message
// with INTERNAL and no message, before any adctl code runs; an integrator reading that looks
// for a bug in adctld. This server interceptor sees the failed decode (no received message)
// and rewrites the status it sends.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <vector>

namespace adctl {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators.
std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
MalformedRequestInterceptors();

}  // namespace adctl
