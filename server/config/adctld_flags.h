// adctld's flags (README "Running the service"), and what they name, read and checked before
// anything is served: the tokens, the TLS files, the ranks' environment, the webhooks. main()
// is flags (AddAdctldFlags) → config (LoadAdctldConfig) → wiring → serve.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/auth/access_policy.h"
#include "server/launcher/launchers.h"
#include "server/notify/webhooks.h"
#include "server/supervisor/path_policy.h"

namespace adctl {

struct AdctldFlags {
  std::string listen;  // "": 127.0.0.1:50051 with tokens, the Unix socket without
  std::string socket_group;
  std::string http = "127.0.0.1:8080";
  std::string data_dir = "./adctl-data";
  std::string worker_binary;
  std::string advertise;
  std::string tokens_file;
  bool owner_only = false;
  std::string on_stop = "detach";
  double retain_ended_hours = 0;
  int64_t metrics_max_points = 100000;
  std::string metrics_auth = "open";
  PathRoots path_roots;
  std::string tls_cert, tls_key, tls_client_ca, tls_ca;
  std::string static_dir;
  std::string log_level;
  int cpu_slots = 0;
  double restart_backoff = 1.0;
  std::string default_launcher = "local";
  // Every kind of launcher adctld knows, each with its own flags (--slurm-*).
  std::vector<std::unique_ptr<LauncherPlugin>> launcher_plugins = LauncherPlugins();
  std::string worker_ifname;
  std::vector<std::string> worker_env;  // K=V
  std::vector<std::string> webhook_urls;
  std::string webhook_secret_file;
  int webhook_attempts = 5;
  double webhook_backoff = 2;
};

// Registers every flag on `app`, with `--config adctld.yaml` (YamlConfig) for them all.
void AddAdctldFlags(CLI::App* app, AdctldFlags* flags);

struct AdctldConfig {
  AccessPolicy access;      // --tokens-file, ADCTLD_TOKEN, --owner-only
  bool open_access = true;  // no tokens: gRPC on the Unix socket only
  // The PEM files' contents (their paths in the flags are made absolute).
  std::string tls_cert_pem, tls_key_pem, tls_client_ca_pem;
  std::vector<std::pair<std::string, std::string>> worker_env;
  WebhookOptions webhooks;
};

// Reads and checks what the flags name (tokens, TLS files, --worker-env, webhooks). Removes
// ADCTLD_TOKEN from the environment (ranks inherit it). InvalidArgument naming the flag for
// anything wrong.
Result<AdctldConfig> LoadAdctldConfig(AdctldFlags* flags);

}  // namespace adctl
