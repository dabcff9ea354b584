// Who may call what: bearer tokens with a role, checked on every JobService call and every
// HTTP JSON endpoint. Tokens are kept only as SHA-256 hashes (the tokens file holds hashes; an
// ADCTLD_TOKEN given through the environment is hashed on load). Immutable after loading, so
// thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

// Each role may do what the ones before it may.
enum class Role {
  kViewer = 1,     // read jobs, events, metrics, logs, checkpoints, samples, devices
  kSubmitter = 2,  // + submit, cancel, pause, resume, export
  kAdmin = 3,      // + everything else
};
const char* RoleName(Role role);

struct AccessDecision {
  enum class Kind { kAllowed, kUnauthenticated, kDenied };
  Kind kind = Kind::kAllowed;
  std::string message;         // why not; never contains the token
  std::string who;             // the token's name when allowed ("" with no tokens configured)
  bool own_jobs_only = false;  // a submitter under --owner-only: its commands only on its jobs
  bool allowed() const { return kind == Kind::kAllowed; }
};

class AccessPolicy {
 public:
  // No tokens: every caller may do everything (adctld then listens on loopback only).
  AccessPolicy() = default;

  // A YAML tokens file:
  //   tokens:
  //     - {name: ci, role: submitter, sha256: <64 hex digits: sha256 of the token>}
  // Errors name the file and the entry.
  static Result<AccessPolicy> FromFile(const std::string& path);
  // Adds a token given in plain text (ADCTLD_TOKEN); only its hash is kept.
  Status AddPlainToken(const std::string& name, Role role, const std::string& token);

  bool enabled() const { return !entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // `bearer`: the token the caller sent ("" when none).
  AccessDecision Check(const std::string& bearer, Role needed) const;
  // The same for the `Authorization` value a caller sent (HTTP header or gRPC metadata; "" when
  // none), read by TokenOfAuthorization: a malformed one is kUnauthenticated saying what is
  // wrong with it.
  AccessDecision CheckAuthorization(const std::string& authorization, Role needed) const;

  // Mutual TLS (--tls-client-ca): JobService callers must also present a client certificate
  // the CA signed. The listener only asks for one (ranks reach WorkerService on their rank's
  // token without), so the services that need it check it (CheckGrpcCaller).
  void RequireClientCertificate() { client_certificate_required_ = true; }
  // --owner-only: a submitter's commands (cancel, pause, resume, export) act only on the jobs
  // that token submitted; viewers still read every job, admins act on every job.
  void LimitSubmittersToTheirOwnJobs() { owner_only_ = true; }
  bool client_certificate_required() const { return client_certificate_required_; }

 private:
  struct Entry {
    std::string name;
    Role role;
    std::string sha256;  // lowercase hex
  };
  Status Add(Entry entry);
  std::vector<Entry> entries_;
  bool client_certificate_required_ = false;
  bool owner_only_ = false;
};

// sha256(token) as 64 lowercase hex digits: what a tokens file stores.
std::string TokenHash(const std::string& token);

// The token of an `Authorization` value, one rule for HTTP and gRPC (JobService, WorkerService,
// reflection): `Bearer <token>` with the scheme in any case (RFC 7235: `bearer`, `BEARER`), or
// the bare token (no scheme, no space). "" for an empty value (no token). Another scheme
// (`Basic ...`) or `Bearer` without a token is an error naming what was expected.
Result<std::string> TokenOfAuthorization(const std::string& authorization);

}  // namespace adctl
