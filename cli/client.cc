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
  for (auto [env_name, key, out] : {std::make_tuple("ADCTL_TLS_CA", "tls_ca", &c.tls.ca),
                                    std::make_tuple("ADCTL_TLS_CERT", "tls_cert", &c.tls.cert),
                                    std::make_tuple("ADCTL_TLS_KEY", "tls_key", &c.tls.key)}) {
    if (const char* env = getenv(env_name); env && *env) {
      *out = env;
    } else if (config && config[key]) {
      *out = config[key].as<std::string>();
    }
  }
  return c;
}

Client::Client(const Connection& connection) : connection_(connection) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // A Unix socket is never TLS (adctld serves it only without tokens, to its own user).
  const bool unix_socket = connection_.server.rfind("unix:", 0) == 0;
  auto credentials =
      ChannelCredentialsFor(unix_socket ? TlsClientFiles() : connection_.tls, &setup_error_);
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

namespace {

bool Contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// The message for a TLS handshake that failed ("" when `detail` is not one): gRPC reports them
// as UNAVAILABLE with OpenSSL's reason inside, which no user should have to decode.
std::string TlsProblem(const std::string& detail, const Connection& c) {
  const std::string at = "adctld at " + c.server;
  if (c.tls.ca.empty()) {
    // Plaintext gRPC to a TLS listener: the server drops the connection at once.
    if (Contains(detail, "Socket closed") || Contains(detail, "Connection reset") ||
        Contains(detail, "Broken pipe")) {
      return at +
             " closed the connection: if it serves TLS (--tls-cert), set ADCTL_TLS_CA to the CA "
             "of its certificate (" +
             detail + ")";
    }
    return "";
  }
  if (Contains(detail, "CERTIFICATE_VERIFY_FAILED") ||
      Contains(detail, "certificate verify failed")) {
    return at + " presented a certificate that ADCTL_TLS_CA " + c.tls.ca +
           " does not verify: set it to the CA that signed adctld's --tls-cert (or check that "
           "the certificate names this host)";
  }
  if (Contains(detail, "WRONG_VERSION_NUMBER") || Contains(detail, "wrong version number") ||
      Contains(detail, "http1.x") || Contains(detail, "PACKET_LENGTH_TOO_LONG")) {
    return at + " does not speak TLS: unset ADCTL_TLS_CA (and tls_ca: in the config file)";
  }
  // TLS 1.3: a server that refuses the client's certificate closes the connection after the
  // client considers the handshake done.
  const bool closed = Contains(detail, "Socket closed") || Contains(detail, "Connection reset");
  if (Contains(detail, "UNKNOWN_CA") || Contains(detail, "BAD_CERTIFICATE") ||
      Contains(detail, "CERTIFICATE_REQUIRED") || Contains(detail, "HANDSHAKE_FAILURE") ||
      (closed && !c.tls.cert.empty())) {
    return at + " refused this client's certificate" +
           (c.tls.cert.empty() ? std::string(" (none given: set ADCTL_TLS_CERT and ADCTL_TLS_KEY)")
                               : " ADCTL_TLS_CERT " + c.tls.cert +
                                     ": it must be signed by adctld's --tls-client-ca");
  }
  if (Contains(detail, "andshake") || Contains(detail, "SSL_ERROR")) {
    return "the TLS handshake with " + at + " failed (" + detail +
           "): check ADCTL_TLS_CA, ADCTL_TLS_CERT and ADCTL_TLS_KEY";
  }
  return "";
}

}  // namespace

int ReportError(const grpc::Status& status, const Connection& connection) {
  const std::string& server = connection.server;
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (const std::string tls = TlsProblem(status.error_message(), connection); !tls.empty()) {
        std::cerr << "adctl: " << tls << "\n";
        return kExitUsage;
      }
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
