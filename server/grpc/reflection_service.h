// gRPC server reflection (grpc.reflection.v1 and v1alpha) served by adctld itself: generic
// clients (grpcurl, Postman, a Node client built from nothing) list the services and fetch their
// descriptors from the generated pool, and, unlike the stock plugin, every stream needs a
// viewer's token like the JobService (server/auth/access_policy.h). Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "server/auth/access_policy.h"

namespace adctl {

class ReflectionV1 final : public grpc::reflection::v1::ServerReflection::Service {
 public:
  // `services`: the full names listed (the reflection services themselves are added).
  ReflectionV1(std::vector<std::string> services, const AccessPolicy* access);
  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                               grpc::reflection::v1::ServerReflectionRequest>* stream) override;

 private:
  const std::vector<std::string> services_;
  const AccessPolicy* const access_;
};

class ReflectionV1Alpha final : public grpc::reflection::v1alpha::ServerReflection::Service {
 public:
  ReflectionV1Alpha(std::vector<std::string> services, const AccessPolicy* access);
  grpc::Status ServerReflectionInfo(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<grpc::reflection::v1alpha::ServerReflectionResponse,
                               grpc::reflection::v1alpha::ServerReflectionRequest>* stream)
      override;

 private:
  const std::vector<std::string> services_;
  const AccessPolicy* const access_;
};

}  // namespace adctl
