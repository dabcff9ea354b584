#include "server/config/adctld_flags.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <tuple>

#include "server/config/adctld_config.h"

namespace adctl {

void AddAdctldFlags(CLI::App* app, AdctldFlags* f) {
  std::vector<std::string> launcher_names, enabling_sections;
  for (const auto& plugin : f->launcher_plugins) {
    launcher_names.push_back(plugin->name());
    if (plugin->HasEnableFlag()) enabling_sections.push_back(plugin->name());
  }
  app->config_formatter(std::make_shared<YamlConfig>(enabling_sections));
  app->allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error
  app->set_config("--config", "",
                  "adctld.yaml: the flags below as YAML keys (`slurm: {partition: gpu}` is "
                  "--slurm-partition gpu); command-line flags override it");
  app->add_option("--listen", f->listen,
                  "gRPC address host:port (port 0: a free port; default 127.0.0.1:50051). TCP "
                  "needs tokens: without them adctld serves gRPC only on <data-dir>/adctld.sock");
  app->add_option("--socket-group", f->socket_group,
                  "without tokens: members of this group may use <data-dir>/adctld.sock too "
                  "(0660; else 0600, adctld's user alone)");
  app->add_option("--http", f->http,
                  "HTTP address for /metrics, /healthz and the JSON API "
                  "(port 0: a free port; empty: off)")
      ->capture_default_str();
  app->add_option("--data-dir", f->data_dir, "state directory: adctl.db and jobs/<id>/")
      ->capture_default_str();
  app->add_option(
      "--cpu-slots", f->cpu_slots,
      "run ranks on N CPU slots instead of GPUs (default: the GPUs NVML finds, else 2)");
  app->add_option("--worker-binary", f->worker_binary,
                  "adworker to launch (default: next to adctld, then PATH)");
  app->add_option("--advertise,--worker-advertise-address", f->advertise,
                  "address ranks dial to reach this adctld (default: the --listen address, "
                  "0.0.0.0 replaced by 127.0.0.1); Slurm ranks on other nodes need a routable one");
  std::string launcher_list;
  for (const std::string& name : launcher_names) {
    launcher_list += (launcher_list.empty() ? "" : " | ") + name;
  }
  app->add_option(
         "--launcher", f->default_launcher,
         "where ranks of a job whose spec names no resources.launcher run: " + launcher_list)
      ->check(CLI::IsMember(launcher_names))
      ->capture_default_str();
  for (const auto& plugin : f->launcher_plugins) plugin->AddFlags(app);
  app->add_option("--worker-ifname", f->worker_ifname,
                  "network interface ranks talk over: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME");
  app->add_option("--worker-env", f->worker_env,
                  "K=V added to every rank's environment unless adctld's own sets K (repeatable)")
      ->allow_extra_args(false);
  app->add_option("--webhook", f->webhook_urls,
                  "URL told (JSON POST) when any job ends or has validation samples (repeatable; "
                  "docs/notifications.md)")
      ->allow_extra_args(false);
  app->add_option("--webhook-secret-file", f->webhook_secret_file,
                  "file whose contents sign every webhook body (X-Adctl-Signature: sha256=HMAC)");
  app->add_option("--webhook-attempts", f->webhook_attempts,
                  "tries per webhook delivery before it is given up (1-20)")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  app->add_option("--webhook-backoff", f->webhook_backoff,
                  "seconds before a failed webhook delivery's first retry; doubles each time")
      ->check(CLI::Range(0.0, 300.0))
      ->capture_default_str();
  app->add_option("--tokens-file", f->tokens_file,
                  "YAML list of {name, role: viewer|submitter|admin, sha256} tokens required on "
                  "every API call (README \"Access\"); env ADCTLD_TOKEN adds an admin token; with "
                  "neither, gRPC is served only on <data-dir>/adctld.sock and HTTP's JSON API "
                  "needs the token in <data-dir>/owner.token");
  app->add_flag("--owner-only", f->owner_only,
                "a submitter token may cancel, pause, resume and export only the jobs it "
                "submitted (admins: any job; viewers: read every job)");
  app->add_option("--tls-cert", f->tls_cert,
                  "PEM certificate: serve gRPC and HTTP over TLS (with --tls-key)");
  app->add_option("--tls-key", f->tls_key, "PEM private key of --tls-cert");
  app->add_option("--tls-client-ca", f->tls_client_ca,
                  "PEM CA: clients must present a certificate it signed (mutual TLS)");
  app->add_option("--tls-ca", f->tls_ca,
                  "PEM CA the ranks verify adctld with (default: --tls-cert itself, for a "
                  "self-signed one)");
  app->add_option("--read-root", f->path_roots.read,
                  "a folder jobs may read models and data from (repeatable; none: anywhere)");
  app->add_option("--write-root", f->path_roots.write,
                  "a folder jobs may write checkpoint.dir / preprocess.output to (repeatable; "
                  "none: anywhere outside the data directory)");
  app->add_option("--metrics-auth", f->metrics_auth,
                  "'open': /metrics and /healthz need no token (Prometheus scrapes them); 'token': "
                  "they need a viewer's, like the JSON API")
      ->check(CLI::IsMember({"open", "token"}))
      ->capture_default_str();
  app->add_option("--retain-ended-hours", f->retain_ended_hours,
                  "remove the folder of a job that ended this many hours ago (its record and "
                  "metrics stay); 0: keep every folder")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app->add_option("--metrics-max-points", f->metrics_max_points,
                  "metric points kept per job and rank: over it, the older half of the series "
                  "thins out (recent steps keep every point); 0: keep every point")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app->add_option("--on-stop", f->on_stop,
                  "on SIGTERM/SIGINT: 'detach' leaves running ranks running (the next adctld "
                  "re-attaches them); 'pause' checkpoints every running job and leaves it PAUSED")
      ->check(CLI::IsMember({"detach", "pause"}))
      ->capture_default_str();
  app->add_option("--static-dir", f->static_dir,
                  "the web page's files (web/dist), served at / on the --http address")
      ->capture_default_str();
  app->add_option("--restart-backoff", f->restart_backoff, "seconds before a restart relaunches")
      ->capture_default_str();
  app->add_option("--log-level", f->log_level, "trace|debug|info|warn|error (env ADCTL_LOG_LEVEL)");
}

Result<AdctldConfig> LoadAdctldConfig(AdctldFlags* f) {
  AdctldConfig c;
  for (const std::string& kv : f->worker_env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("--worker-env " + kv + ": expected K=V");
    }
    c.worker_env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }

  // Tokens come from a file of hashes or the environment, never the command line (ps shows it).
  if (!f->tokens_file.empty()) {
    auto loaded = AccessPolicy::FromFile(f->tokens_file);
    if (!loaded.ok()) return InvalidArgument(loaded.status().message());
    c.access = std::move(loaded.value());
  }
  if (const char* t = getenv("ADCTLD_TOKEN"); t != nullptr && *t != '\0') {
    Status added = c.access.AddPlainToken("ADCTLD_TOKEN", Role::kAdmin, t);
    if (!added.ok()) return InvalidArgument(added.message());
  }
  unsetenv("ADCTLD_TOKEN");  // ranks inherit adctld's environment
  if (f->owner_only) {
    if (!c.access.enabled()) {
      return InvalidArgument(
          "--owner-only needs tokens (--tokens-file or ADCTLD_TOKEN): without them every caller "
          "is adctld's own user");
    }
    c.access.LimitSubmittersToTheirOwnJobs();
  }
  c.open_access = !c.access.enabled();

  // TLS: the PEM files are read now, so a wrong path fails the start naming the flag.
  if (f->tls_cert.empty() != f->tls_key.empty()) {
    return InvalidArgument("--tls-cert and --tls-key: give both, or neither");
  }
  for (auto [flag, path, out] :
       {std::make_tuple("--tls-cert", &f->tls_cert, &c.tls_cert_pem),
        std::make_tuple("--tls-key", &f->tls_key, &c.tls_key_pem),
        std::make_tuple("--tls-client-ca", &f->tls_client_ca, &c.tls_client_ca_pem),
        std::make_tuple("--tls-ca", &f->tls_ca, static_cast<std::string*>(nullptr))}) {
    if (path->empty()) continue;
    std::error_code abs_ec;
    *path = std::filesystem::absolute(*path, abs_ec).string();
    std::ifstream in(*path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || text.str().find("-----BEGIN ") == std::string::npos) {
      return InvalidArgument(std::string(flag) + " " + *path + ": cannot be read as a PEM file");
    }
    if (out != nullptr) *out = text.str();
  }
  if (!f->tls_client_ca.empty() && f->tls_cert.empty()) {
    return InvalidArgument("--tls-client-ca needs --tls-cert and --tls-key");
  }

  auto webhooks = LoadWebhookOptions(f->webhook_urls, f->webhook_secret_file, f->webhook_attempts,
                                     f->webhook_backoff);
  if (!webhooks.ok()) return webhooks.status();
  c.webhooks = std::move(*webhooks);
  return c;
}

}  // namespace adctl
