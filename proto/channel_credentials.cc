#include "proto/channel_credentials.h"

#include <fstream>
#include <sstream>

namespace adctl {

namespace {

// The PEM text of `path` ("" and `error` naming `setting` when it is not a readable PEM file).
std::string ReadPem(const char* setting, const std::string& path, std::string* error) {
  std::ifstream in(path);
  std::stringstream pem;
  pem << in.rdbuf();
  if (!in || pem.str().find("-----BEGIN ") == std::string::npos) {
    if (error->empty())
      *error = std::string(setting) + " " + path + ": cannot be read as a PEM file";
    return "";
  }
  return pem.str();
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const TlsClientFiles& files,
                                                                std::string* error) {
  if (files.ca.empty()) {
    if (!files.cert.empty() || !files.key.empty()) {
      *error = "ADCTL_TLS_CERT/ADCTL_TLS_KEY need ADCTL_TLS_CA (the CA of adctld's certificate)";
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadPem("ADCTL_TLS_CA", files.ca, error);
  if (files.cert.empty() != files.key.empty()) {
    if (error->empty()) *error = "ADCTL_TLS_CERT and ADCTL_TLS_KEY: give both, or neither";
  } else if (!files.cert.empty()) {
    ssl.pem_cert_chain = ReadPem("ADCTL_TLS_CERT", files.cert, error);
    ssl.pem_private_key = ReadPem("ADCTL_TLS_KEY", files.key, error);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace adctl
