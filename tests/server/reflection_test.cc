// Server reflection as a generic client sees it (grpcurl's calls): both protocol versions list
// adctld's services and return their descriptors, and, like the JobService, need a token.
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "adctl/v1/job_service.grpc.pb.h"
#include "server/grpc/reflection_service.h"

namespace adctl {
namespace {

class ReflectionTest : public ::testing::Test {
 protected:
  void Serve(const AccessPolicy* access) {
    v1_ = std::make_unique<ReflectionV1>(
        std::vector<std::string>{v1::JobService::service_full_name()}, access);
    v1alpha_ = std::make_unique<ReflectionV1Alpha>(
        std::vector<std::string>{v1::JobService::service_full_name()}, access);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(v1_.get());
    builder.RegisterService(v1alpha_.get());
    server_ = builder.BuildAndStart();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  // One request, one answer, on a v1 stream.
  grpc::Status AskV1(const grpc::reflection::v1::ServerReflectionRequest& req,
                     grpc::reflection::v1::ServerReflectionResponse* resp,
                     const std::string& token = "") {
    auto stub = grpc::reflection::v1::ServerReflection::NewStub(channel_);
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    auto stream = stub->ServerReflectionInfo(&ctx);
    stream->Write(req);
    stream->WritesDone();
    while (stream->Read(resp)) {
    }
    return stream->Finish();
  }

  std::unique_ptr<ReflectionV1> v1_;
  std::unique_ptr<ReflectionV1Alpha> v1alpha_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0;
};

TEST_F(ReflectionTest, BothVersionsListTheServicesAndReturnTheirDescriptors) {
  AccessPolicy open;
  Serve(&open);
  grpc::reflection::v1::ServerReflectionRequest list;
  list.set_list_services("*");
  grpc::reflection::v1::ServerReflectionResponse resp;
  ASSERT_TRUE(AskV1(list, &resp).ok());
  std::vector<std::string> names;
  for (const auto& s : resp.list_services_response().service()) names.push_back(s.name());
  EXPECT_NE(std::find(names.begin(), names.end(), "adctl.v1.JobService"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "grpc.reflection.v1.ServerReflection"),
            names.end());

  grpc::reflection::v1::ServerReflectionRequest symbol;
  symbol.set_file_containing_symbol("adctl.v1.JobService");
  ASSERT_TRUE(AskV1(symbol, &resp).ok());
  ASSERT_GE(resp.file_descriptor_response().file_descriptor_proto_size(), 1);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(file.ParseFromString(resp.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.name(), "adctl/v1/job_service.proto");
  bool has_submit = false;
  for (const auto& m : file.service(0).method()) has_submit |= m.name() == "SubmitJob";
  EXPECT_TRUE(has_submit);

  symbol.set_file_containing_symbol("adctl.v1.NoSuchThing");
  ASSERT_TRUE(AskV1(symbol, &resp).ok());
  EXPECT_EQ(resp.error_response().error_code(), grpc::StatusCode::NOT_FOUND);

  // v1alpha: the same answers for older clients.
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel_);
  grpc::ClientContext ctx;
  auto stream = stub->ServerReflectionInfo(&ctx);
  grpc::reflection::v1alpha::ServerReflectionRequest alpha;
  alpha.set_file_by_filename("adctl/v1/job_service.proto");
  stream->Write(alpha);
  stream->WritesDone();
  grpc::reflection::v1alpha::ServerReflectionResponse alpha_resp;
  ASSERT_TRUE(stream->Read(&alpha_resp));
  EXPECT_GE(alpha_resp.file_descriptor_response().file_descriptor_proto_size(), 1);
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ReflectionTest, ReflectionNeedsAViewersTokenWhenTokensAreConfigured) {
  AccessPolicy access;
  ASSERT_TRUE(access.AddPlainToken("grafana", Role::kViewer, "viewer-token").ok());
  Serve(&access);
  grpc::reflection::v1::ServerReflectionRequest list;
  list.set_list_services("*");
  grpc::reflection::v1::ServerReflectionResponse resp;
  EXPECT_EQ(AskV1(list, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(AskV1(list, &resp, "viewer-token").ok());
  EXPECT_GE(resp.list_services_response().service_size(), 1);
}

}  // namespace
}  // namespace adctl
