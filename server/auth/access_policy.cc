#include "server/auth/access_policy.h"

#include <strings.h>
#include <yaml-cpp/yaml.h>

#include "common/sha256.h"
#include "server/supervisor/secrets.h"

namespace adctl {

namespace {

bool IsHexDigest(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<Role> ParseRole(const std::string& name) {
  for (Role r : {Role::kViewer, Role::kSubmitter, Role::kAdmin}) {
    if (name == RoleName(r)) return r;
  }
  return InvalidArgument("role: must be one of 'viewer', 'submitter', 'admin', got '" + name + "'");
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kViewer:
      return "viewer";
    case Role::kSubmitter:
      return "submitter";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

std::string TokenHash(const std::string& token) { return Sha256Hex(token); }

Result<std::string> TokenOfAuthorization(const std::string& authorization) {
  const auto blank = [](char c) { return c == ' ' || c == '\t'; };
  size_t begin = 0, end = authorization.size();
  while (begin < end && blank(authorization[begin])) ++begin;
  while (end > begin && blank(authorization[end - 1])) --end;
  const std::string value = authorization.substr(begin, end - begin);
  size_t space = 0;
  while (space < value.size() && !blank(value[space])) ++space;
  if (space == value.size()) {
    if (value.size() == 6 && strncasecmp(value.c_str(), "bearer", 6) == 0) {
      return InvalidArgument("Authorization: 'Bearer' without a token; expected 'Bearer <token>'");
    }
    return value;  // "" (no token), or a bare token
  }
  const std::string scheme = value.substr(0, space);
  if (strcasecmp(scheme.c_str(), "bearer") != 0) {
    return InvalidArgument("Authorization: scheme '" + scheme +
                           "' is not accepted; expected 'Bearer <token>'");
  }
  size_t token = space;
  while (token < value.size() && blank(value[token])) ++token;
  return value.substr(token);
}

Status AccessPolicy::Add(Entry entry) {
  for (const Entry& e : entries_) {
    if (e.name == entry.name) return InvalidArgument("name: '" + entry.name + "' appears twice");
    if (e.sha256 == entry.sha256) {
      return InvalidArgument("sha256: the token of '" + entry.name + "' is also '" + e.name +
                             "''s");
    }
  }
  entries_.push_back(std::move(entry));
  return Status::Ok();
}

Status AccessPolicy::AddPlainToken(const std::string& name, Role role, const std::string& token) {
  if (token.size() < 8) return InvalidArgument(name + ": a token needs at least 8 characters");
  return Add({name, role, TokenHash(token)});
}

Result<AccessPolicy> AccessPolicy::FromFile(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return NotFound("--tokens-file " + path + ": cannot be read");
  } catch (const YAML::Exception& e) {
    return InvalidArgument("--tokens-file " + path + ": not YAML: " + e.msg);
  }
  const auto fail = [&path](const std::string& where, const std::string& why) {
    return InvalidArgument("--tokens-file " + path + ": " + where + why);
  };
  if (!root.IsMap() || !root["tokens"] || !root["tokens"].IsSequence()) {
    return fail("", "expected 'tokens:' with a list of {name, role, sha256}");
  }
  AccessPolicy policy;
  const YAML::Node tokens = root["tokens"];
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string where = "tokens[" + std::to_string(i) + "].";
    const YAML::Node t = tokens[i];
    if (!t.IsMap()) return fail(where.substr(0, where.size() - 1), ": expected a mapping");
    for (const auto& kv : t) {
      const std::string key = kv.first.as<std::string>();
      if (key != "name" && key != "role" && key != "sha256") {
        return fail(where + key, ": unknown field (name, role, sha256)");
      }
    }
    for (const char* key : {"name", "role", "sha256"}) {
      if (!t[key] || !t[key].IsScalar() || t[key].as<std::string>().empty()) {
        return fail(where + key, ": required");
      }
    }
    Entry e;
    e.name = t["name"].as<std::string>();
    auto role = ParseRole(t["role"].as<std::string>());
    if (!role.ok()) return fail(where, role.status().message());
    e.role = role.value();
    e.sha256 = t["sha256"].as<std::string>();
    if (!IsHexDigest(e.sha256)) {
      return fail(where + "sha256",
                  ": expected 64 lowercase hex digits (printf %s \"$TOKEN\" | sha256sum)");
    }
    Status added = policy.Add(std::move(e));
    if (!added.ok()) return fail(where, added.message());
  }
  if (!policy.enabled()) return fail("tokens", ": the list is empty");
  return policy;
}

AccessDecision AccessPolicy::Check(const std::string& bearer, Role needed) const {
  AccessDecision d;
  if (!enabled()) return d;
  if (bearer.empty()) {
    d.kind = AccessDecision::Kind::kUnauthenticated;
    d.message =
        "no token: this adctld requires 'Authorization: Bearer <token>' (adctl: ADCTL_TOKEN or "
        "token: in ~/.config/adctl/config.yaml)";
    return d;
  }
  const std::string hash = TokenHash(bearer);
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    if (SameSecret(e.sha256, hash)) match = &e;
  }
  if (match == nullptr) {
    d.kind = AccessDecision::Kind::kUnauthenticated;
    d.message = "unknown token: check ADCTL_TOKEN or token: in ~/.config/adctl/config.yaml";
    return d;
  }
  d.who = match->name;
  d.own_jobs_only = owner_only_ && match->role == Role::kSubmitter;
  if (static_cast<int>(match->role) < static_cast<int>(needed)) {
    d.kind = AccessDecision::Kind::kDenied;
    d.message = "token '" + match->name + "' is a " + RoleName(match->role) + "; this needs " +
                RoleName(needed);
  }
  return d;
}

AccessDecision AccessPolicy::CheckAuthorization(const std::string& authorization,
                                                Role needed) const {
  if (!enabled()) return AccessDecision();
  auto token = TokenOfAuthorization(authorization);
  if (!token.ok()) {
    AccessDecision d;
    d.kind = AccessDecision::Kind::kUnauthenticated;
    d.message = token.status().message();
    return d;
  }
  return Check(token.value(), needed);
}

}  // namespace adctl
