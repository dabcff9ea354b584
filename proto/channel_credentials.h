// How a client (adctl, a rank) dials adctld: plaintext, or TLS verifying adctld's certificate
// against a CA file (ADCTL_TLS_CA).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace adctl {

// Plaintext when `ca_file` is empty, else TLS with `ca_file`'s PEM as the trusted roots. A file
// that cannot be read sets `error` (naming it) and still asks for TLS, so the connection fails
// instead of falling back to plaintext.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const std::string& ca_file,
                                                                std::string* error);

}  // namespace adctl
