#include "server/grpc/reflection_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

#include "server/grpc/job_service.h"

namespace adctl {

namespace {

namespace pb = google::protobuf;

std::vector<std::string> WithReflection(std::vector<std::string> services) {
  services.push_back("grpc.reflection.v1.ServerReflection");
  services.push_back("grpc.reflection.v1alpha.ServerReflection");
  return services;
}

// `file` and every file it imports, each once, as serialized FileDescriptorProtos.
template <typename FileResponse>
void AddFileWithDependencies(const pb::FileDescriptor* file, std::set<std::string>* sent,
                             FileResponse* out) {
  if (file == nullptr || !sent->insert(file->name()).second) return;
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  out->add_file_descriptor_proto(proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileWithDependencies(file->dependency(i), sent, out);
  }
}

// One answer per request, on the same stream, for either protocol version (the messages are
// the same; only their package differs).
template <typename Request, typename Response>
grpc::Status Serve(grpc::ServerContext* ctx, grpc::ServerReaderWriter<Response, Request>* stream,
                   const std::vector<std::string>& services, const AccessPolicy* access) {
  const AccessDecision d = CheckGrpcCaller(ctx, *access, Role::kViewer);
  if (d.kind == AccessDecision::Kind::kUnauthenticated) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, d.message);
  }
  if (d.kind == AccessDecision::Kind::kDenied) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, d.message);
  }
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  Request req;
  while (stream->Read(&req)) {
    Response resp;
    resp.set_valid_host(req.host());
    *resp.mutable_original_request() = req;
    const auto fail = [&resp](grpc::StatusCode code, const std::string& message) {
      resp.mutable_error_response()->set_error_code(code);
      resp.mutable_error_response()->set_error_message(message);
    };
    std::set<std::string> sent;
    switch (req.message_request_case()) {
      case Request::kFileByFilename: {
        const pb::FileDescriptor* file = pool->FindFileByName(req.file_by_filename());
        if (file == nullptr) {
          fail(grpc::StatusCode::NOT_FOUND, "no file " + req.file_by_filename());
        } else {
          AddFileWithDependencies(file, &sent, resp.mutable_file_descriptor_response());
        }
        break;
      }
      case Request::kFileContainingSymbol: {
        const pb::FileDescriptor* file =
            pool->FindFileContainingSymbol(req.file_containing_symbol());
        if (file == nullptr) {
          fail(grpc::StatusCode::NOT_FOUND, "no symbol " + req.file_containing_symbol());
        } else {
          AddFileWithDependencies(file, &sent, resp.mutable_file_descriptor_response());
        }
        break;
      }
      case Request::kFileContainingExtension: {
        const auto& ext = req.file_containing_extension();
        const pb::Descriptor* type = pool->FindMessageTypeByName(ext.containing_type());
        const pb::FieldDescriptor* field =
            type == nullptr ? nullptr : pool->FindExtensionByNumber(type, ext.extension_number());
        if (field == nullptr) {
          fail(grpc::StatusCode::NOT_FOUND, "no extension " +
                                                std::to_string(ext.extension_number()) + " of " +
                                                ext.containing_type());
        } else {
          AddFileWithDependencies(field->file(), &sent, resp.mutable_file_descriptor_response());
        }
        break;
      }
      case Request::kAllExtensionNumbersOfType: {
        const pb::Descriptor* type =
            pool->FindMessageTypeByName(req.all_extension_numbers_of_type());
        if (type == nullptr) {
          fail(grpc::StatusCode::NOT_FOUND, "no type " + req.all_extension_numbers_of_type());
        } else {
          std::vector<const pb::FieldDescriptor*> extensions;
          pool->FindAllExtensions(type, &extensions);
          auto* out = resp.mutable_all_extension_numbers_response();
          out->set_base_type_name(type->full_name());
          for (const pb::FieldDescriptor* e : extensions) out->add_extension_number(e->number());
        }
        break;
      }
      case Request::kListServices:
        for (const std::string& name : services) {
          resp.mutable_list_services_response()->add_service()->set_name(name);
        }
        break;
      default:
        fail(grpc::StatusCode::UNIMPLEMENTED, "unknown reflection request");
        break;
    }
    if (!stream->Write(resp)) break;
  }
  return grpc::Status::OK;
}

}  // namespace

ReflectionV1::ReflectionV1(std::vector<std::string> services, const AccessPolicy* access)
    : services_(WithReflection(std::move(services))), access_(access) {}

grpc::Status ReflectionV1::ServerReflectionInfo(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<grpc::reflection::v1::ServerReflectionResponse,
                             grpc::reflection::v1::ServerReflectionRequest>* stream) {
  return Serve(ctx, stream, services_, access_);
}

ReflectionV1Alpha::ReflectionV1Alpha(std::vector<std::string> services, const AccessPolicy* access)
    : services_(WithReflection(std::move(services))), access_(access) {}

grpc::Status ReflectionV1Alpha::ServerReflectionInfo(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<grpc::reflection::v1alpha::ServerReflectionResponse,
                             grpc::reflection::v1alpha::ServerReflectionRequest>* stream) {
  return Serve(ctx, stream, services_, access_);
}

}  // namespace adctl
