// adctld's data directory (--data-dir): what lives where. adctld, adworker, the CLI and the
// tests all name these paths through this one struct (job folders inside: common/job_layout.h).
//
//   <data-dir>/            0700 (0710 with --socket-group: the group may reach the socket)
//     adctl.db             the SQLite state (0600)
//     adctld.lock          one adctld per data directory (flock), holding its pid
//     adctld.json          where this adctld serves: {"grpc", "http", "pid", ...}
//     adctld.sock          gRPC on a Unix socket, when no tokens are configured (0600 / 0660)
//     owner.token          the HTTP side's token when no tokens are configured (0600)
//     jobs/<id>/           one folder per job (JobLayout)
#pragma once

#include <string>

namespace adctl {

struct DataDirLayout {
  explicit DataDirLayout(std::string dir) : root(std::move(dir)) {}

  std::string database() const { return root + "/adctl.db"; }
  std::string lock() const { return root + "/adctld.lock"; }
  std::string info() const { return root + "/adctld.json"; }
  std::string socket() const { return root + "/adctld.sock"; }
  std::string owner_token() const { return root + "/owner.token"; }
  std::string jobs() const { return root + "/jobs"; }
  std::string job(const std::string& id) const { return jobs() + "/" + id; }
  // The gRPC target of the Unix socket ("unix:<dir>/adctld.sock").
  std::string socket_target() const { return "unix:" + socket(); }

  std::string root;
};

// adctld's default --data-dir, relative to where it runs; the CLI looks for its socket there.
constexpr char kDefaultDataDir[] = "./adctl-data";

}  // namespace adctl
