// How a client (adctl, a rank) dials adctld: plaintext, or TLS verifying adctld's certificate
// against a CA file (ADCTL_TLS_CA), with a client certificate when adctld asks for one (mutual
// TLS: ADCTL_TLS_CERT and ADCTL_TLS_KEY).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace adctl {

// PEM files; all "" : plaintext.
struct TlsClientFiles {
  std::string ca;    // adctld's CA (ADCTL_TLS_CA): TLS when set
  std::string cert;  // this client's certificate (ADCTL_TLS_CERT), with `key`
  std::string key;   // its private key (ADCTL_TLS_KEY)
};

// Plaintext when `files.ca` is empty, else TLS trusting `files.ca` and presenting `cert`/`key`
// when given. A file that cannot be read, or a certificate without its key, sets `error` (naming
// the setting and the file) and still asks for TLS, so the connection fails instead of falling
// back to plaintext.
std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsClientFiles& files,
                                                                std::string* error);

}  // namespace adctl
