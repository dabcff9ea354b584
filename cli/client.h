// How adctl reaches adctld: server address and token resolution, the gRPC stub, and the mapping
// from gRPC errors to adctl's exit codes.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "adctl/v1/job_service.grpc.pb.h"
#include "proto/channel_credentials.h"

namespace adctl::cli {

// Exit codes (README "CLI"; job-service-anchors.md §5.2).
constexpr int kExitSucceeded = 0;
constexpr int kExitFailed = 1;       // job FAILED, or a server-side error
constexpr int kExitUsage = 2;        // usage or validation error (bad flag, bad spec, unknown id)
constexpr int kExitCancelled = 3;    // job CANCELLED
constexpr int kExitTimeout = 4;      // --timeout passed before the job ended
constexpr int kExitUnreachable = 5;  // adctld cannot be reached
constexpr int kExitPaused = 6;       // `wait`: the job is PAUSED (it waits for `adctl resume`)

struct Connection {
  std::string server;  // host:port
  std::string token;   // "" when none
  TlsClientFiles tls;  // PEM files: TLS verifying adctld against tls.ca ("" : plaintext), and
                       // the client certificate mutual TLS asks for
};

// --server flag, else env ADCTL_SERVER, else `server:` in ~/.config/adctl/config.yaml, else
// localhost:50051. Token: env ADCTL_TOKEN, else `token:` in the config file. TLS: env
// ADCTL_TLS_CA, ADCTL_TLS_CERT and ADCTL_TLS_KEY, else `tls_ca:`, `tls_cert:` and `tls_key:` in
// the config file.
Connection ResolveConnection(const std::string& server_flag);

// Prints "adctl: <message>" to stderr and returns the exit code for a failed call on
// `connection`. TLS failures (a certificate that does not verify, adctld not speaking TLS, a
// client certificate refused) get their own message and exit 2: retrying will not help.
int ReportError(const grpc::Status& status, const Connection& connection);

class Client {
 public:
  explicit Client(const Connection& connection);
  // Why the connection cannot be set up ("" when it can): a TLS file that cannot be read.
  const std::string& setup_error() const { return setup_error_; }
  v1::JobService::Stub& stub() { return *stub_; }
  // A context with the token and, when > 0, a deadline.
  std::unique_ptr<grpc::ClientContext> Context(double timeout_seconds = 30) const;
  const std::string& server() const { return connection_.server; }
  int ReportError(const grpc::Status& status) const {
    return cli::ReportError(status, connection_);
  }
  // One unary JobService call: the context (token, deadline), the call and the error mapping.
  // Returns 0 with *response filled, or the exit code after printing the error.
  template <typename Request, typename Response>
  int Call(grpc::Status (v1::JobService::Stub::*method)(grpc::ClientContext*, const Request&,
                                                        Response*),
           const Request& request, Response* response, double timeout_seconds = 30) {
    auto ctx = Context(timeout_seconds);
    grpc::Status status = ((*stub_).*method)(ctx.get(), request, response);
    return status.ok() ? 0 : ReportError(status);
  }

 private:
  Connection connection_;
  std::string setup_error_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace adctl::cli
