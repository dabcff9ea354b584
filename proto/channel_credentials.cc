#include "proto/channel_credentials.h"

#include <fstream>
#include <sstream>

namespace adctl {

std::shared_ptr<grpc::ChannelCredentials> ChannelCredentialsFor(const std::string& ca_file,
                                                                std::string* error) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  std::ifstream in(ca_file);
  std::stringstream pem;
  pem << in.rdbuf();
  if (!in || pem.str().empty()) *error = "ADCTL_TLS_CA " + ca_file + ": cannot be read";
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  return grpc::SslCredentials(ssl);
}

}  // namespace adctl
