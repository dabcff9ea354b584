#include "cli/client.h"

#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "common/data_dir_layout.h"
#include "proto/channel_credentials.h"

namespace adctl::cli {

namespace {

YAML::Node LoadConfig() {
  const char* home = getenv("HOME");
  if (!home) return YAML::Node();
  std::string path = std::string(home) + "/.config/adctl/config.yaml";
  if (!std::filesystem::exists(path)) return YAML::Node();
  try {
    return YAML::LoadFile(path);
  } catch (const std::exception& e) {
    std::cerr << "adctl: ignoring " << path << ": " << e.what() << "\n";
    return YAML::Node();
  }
}

// adctld's data directory as the CLI guesses it: ADCTL_DATA_DIR, else adctld's default.
std::string DataDirOrDefault() {
  const char* env = getenv("ADCTL_DATA_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(kDefaultDataDir);
}

}  // namespace

Connection ResolveConnection(const std::string& server_flag) {
  Connection c;
  YAML::Node config = LoadConfig();
  if (!server_flag.empty()) {
    c.server = server_flag;
  } else if (const char* env = getenv("ADCTL_SERVER"); env && *env) {
    c.server = env;
  } else if (config && config["server"]) {
    c.server = config["server"].as<std::string>();
  } else if (const std::string local = DataDirLayout(DataDirOrDefault()).socket();
             std::filesystem::exists(local)) {
    // A tokenless adctld serves only on its data directory's Unix socket.
    c.server = "unix:" + local;
  } else {
    c.server = "localhost:50051";
  }
  if (const char* env = getenv("ADCTL_TOKEN"); env && *env) {
    c.token = env;
  } else if (config && config["token"]) {
    c.token = config["token"].as<std::string>();
  }
  if (const char* env = getenv("ADCTL_TLS_CA"); env && *env) {
    c.tls_ca = env;
  } else if (config && config["tls_ca"]) {
    c.tls_ca = config["tls_ca"].as<std::string>();
  }
  return c;
}

Client::Client(const Connection& connection) : connection_(connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::string error;
  // A Unix socket is never TLS (adctld serves it only without tokens, to its own user).
  const bool unix_socket = connection_.server.rfind("unix:", 0) == 0;
  auto credentials = ChannelCredentialsFor(unix_socket ? "" : connection_.tls_ca, &error);
  if (!error.empty()) std::cerr << "adctl: " << error << "\n";
  channel_ = grpc::CreateCustomChannel(connection_.server, credentials, args);
  stub_ = v1::JobService::NewStub(channel_);
}

std::unique_ptr<grpc::ClientContext> Client::Context(double timeout_seconds) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!connection_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + connection_.token);
  if (timeout_seconds > 0) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  }
  return ctx;
}

int ReportError(const grpc::Status& status, const std::string& server) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      std::cerr << "adctl: cannot reach adctld at " << server << " (" << status.error_message()
                << "); start it or set --server / ADCTL_SERVER\n";
      return kExitUnreachable;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      std::cerr << "adctl: " << status.error_message() << "\n";
      return kExitUsage;
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
      std::cerr << "adctl: " << status.error_message() << "\n";
      return kExitUsage;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      std::cerr << "adctl: adctld at " << server << " did not answer in time\n";
      return kExitUnreachable;
    default:
      std::cerr << "adctl: " << status.error_message() << " (" << status.error_code() << ")\n";
      return kExitFailed;
  }
}

}  // namespace adctl::cli
