// TLS on adctld's two listeners: HTTPS without tokens (gRPC stays on the Unix socket), TLS on
// gRPC and HTTPS with tokens (the ranks verify adctld too), and mutual TLS with the mistakes a
// user makes named. Real certificates from the openssl command line, a real adctld and ranks.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;

// The README's tiny job, two steps on one rank.
std::string TinyJob() {
  return TinyJobSpec("tiny", 2, "gpus: 1, max_restarts: 0, grace_seconds: 20");
}

class TlsTest : public CoordinatorTest<2> {};

std::string MakeTestCertificates(const std::string& d) {
  fs::create_directories(d);
  const std::string make =
      "cd '" + d +
      "' && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
      "-subj '/CN=adctl test CA' && openssl req -newkey rsa:2048 -nodes -keyout server.key "
      "-out server.csr -subj '/CN=localhost' && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' "
      "> ext.cnf && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
      "-out server.pem -days 1 -extfile ext.cnf"
      " && openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr "
      "-subj '/CN=ci-pipeline' && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
      "-CAcreateserial -out client.pem -days 1"
      " && openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem "
      "-days 1 -subj '/CN=another CA' && openssl req -newkey rsa:2048 -nodes -keyout "
      "other-client.key -out other-client.csr -subj '/CN=stranger' && openssl x509 -req -in "
      "other-client.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial -out "
      "other-client.pem -days 1";
  if (system((make + " > openssl.log 2>&1").c_str()) != 0) {
    ADD_FAILURE() << ReadFile(d + "/openssl.log");
    return "";
  }
  return d;
}

// /healthz answers over HTTPS, the server verified against `ca`.
void ExpectHttpsVerifiesWith(const Coordinator& c, const std::string& ca) {
  const std::string http = c.http_address();
  httplib::SSLClient https(http.substr(0, http.rfind(':')),
                           std::stoi(http.substr(http.rfind(':') + 1)));
  https.set_ca_cert_path(ca.c_str());
  https.enable_server_certificate_verification(true);
  auto health = https.Get("/healthz");
  ASSERT_TRUE(health) << "HTTPS with the CA: " << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
}

// Without tokens TLS covers the HTTP side (TCP); gRPC is the Unix socket, plain, and the ranks
// dial it without TLS (they were handed the CA and failed every handshake).
TEST_F(TlsTest, TlsWithoutTokensServesHttpsAndRanksUseTheSocket) {
  Coordinator& c = *coordinator_;
  const std::string d = MakeTestCertificates(c.dir() + "/tls");
  ASSERT_FALSE(d.empty());
  c.Stop();
  c.SetExtraArgs({"--tls-cert", d + "/server.pem", "--tls-key", d + "/server.key"});
  c.Start();
  auto r = c.Adctl({"submit", c.WriteSpec("tls", TinyJob()), "--wait", "--timeout", "240"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream info_file(c.dir() + "/data/adctld.json");
  const auto info = nlohmann::json::parse(info_file, nullptr, false);
  ASSERT_TRUE(info.contains("tls")) << info.dump();
  EXPECT_FALSE(info["tls"].value("grpc", true)) << "gRPC (the socket) is not TLS";
  EXPECT_TRUE(info["tls"].value("http", false));
  ExpectHttpsVerifiesWith(c, d + "/ca.pem");
}

TEST_F(TlsTest, TlsServesGrpcAndHttpsAndRanksVerifyAdctld) {
  // TLS guards TCP, which needs tokens (tokenless, gRPC is a Unix socket).
  coordinator_.reset();
  Coordinator c(1, "s3cret-tls");
  c.Start();
  const std::string d = MakeTestCertificates(c.dir() + "/tls");
  ASSERT_FALSE(d.empty());
  c.Stop();
  c.ForgetAddresses();
  c.SetExtraArgs(
      {"--tls-cert", d + "/server.pem", "--tls-key", d + "/server.key", "--tls-ca", d + "/ca.pem"});
  c.SetClientEnv({"ADCTL_TLS_CA=" + d + "/ca.pem"});
  c.Start();
  // The ranks reach adctld over TLS too (verifying it with the CA adctld hands them).
  auto r = c.Adctl({"submit", c.WriteSpec("tls", TinyJob()), "--wait", "--timeout", "240"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // A client without the CA cannot talk to it; HTTPS verifies against the CA.
  c.SetClientEnv({});
  auto plain = c.Adctl({"ls"});
  EXPECT_NE(plain.exit_code, 0) << plain.out;
  ExpectHttpsVerifiesWith(c, d + "/ca.pem");
}

// Mutual TLS: adctl presents a client certificate the CA signed; the ranks reach WorkerService
// on their rank tokens without one, so the job runs. TLS set up wrong exits 2 with a message
// of adctl's own, no gRPC log line.
TEST_F(TlsTest, MutualTlsRunsAJobAndNamesTlsMistakes) {
  coordinator_.reset();
  Coordinator c(1, "s3cret-mtls");
  c.Start();
  const std::string d = MakeTestCertificates(c.dir() + "/tls");
  ASSERT_FALSE(d.empty());
  c.Stop();
  c.ForgetAddresses();
  c.SetExtraArgs({"--tls-cert", d + "/server.pem", "--tls-key", d + "/server.key", "--tls-ca",
                  d + "/ca.pem", "--tls-client-ca", d + "/ca.pem"});
  const std::vector<std::string> good = {"ADCTL_TLS_CA=" + d + "/ca.pem",
                                         "ADCTL_TLS_CERT=" + d + "/client.pem",
                                         "ADCTL_TLS_KEY=" + d + "/client.key"};
  c.SetClientEnv(good);
  c.Start();
  auto info = nlohmann::json::parse(ReadFile(c.dir() + "/data/adctld.json"));
  EXPECT_TRUE(info["tls"].value("client_certificates", false)) << info.dump();
  auto r = c.Adctl({"submit", c.WriteSpec("mtls", TinyJob()), "--wait", "--timeout", "240"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;

  // What a user gets wrong, each named (and exit 2: fixing the setup, not retrying, helps).
  const auto expect_mistake = [&c](const std::vector<std::string>& env, const std::string& says) {
    c.SetClientEnv(env);
    CommandResult got = c.Adctl({"ls"});
    EXPECT_EQ(got.exit_code, 2) << says << "\n" << got.err;
    EXPECT_NE(got.err.find(says), std::string::npos) << got.err;
    EXPECT_EQ(got.err.find(".cc:"), std::string::npos) << "a raw gRPC log line: " << got.err;
  };
  expect_mistake({"ADCTL_TLS_CA=" + d + "/ca.pem"}, "no client certificate: this adctld requires");
  expect_mistake({"ADCTL_TLS_CA=" + d + "/ca.pem", "ADCTL_TLS_CERT=" + d + "/other-client.pem",
                  "ADCTL_TLS_KEY=" + d + "/other-client.key"},
                 "refused this client's certificate");
  expect_mistake({"ADCTL_TLS_CA=" + d + "/other-ca.pem", "ADCTL_TLS_CERT=" + d + "/client.pem",
                  "ADCTL_TLS_KEY=" + d + "/client.key"},
                 "does not verify: set it to the CA that signed adctld's --tls-cert");
  expect_mistake({"ADCTL_TLS_CA=" + d + "/missing.pem"},
                 "ADCTL_TLS_CA " + d + "/missing.pem: cannot be read as a PEM file");
  expect_mistake({"ADCTL_TLS_CA=" + d + "/ca.pem", "ADCTL_TLS_CERT=" + d + "/client.pem"},
                 "ADCTL_TLS_CERT and ADCTL_TLS_KEY: give both, or neither");
  expect_mistake({}, "set ADCTL_TLS_CA to the CA of its certificate");
}

}  // namespace
}  // namespace adctl::testing
