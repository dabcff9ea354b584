// adctld: the adctl coordinator daemon.
//
// Owns the SQLite state under --data-dir, serves adctl.v1.JobService and WorkerService over
// gRPC (with server reflection), /metrics + /healthz + the web page and its JSON API over HTTP
// (server/http/http_server.h), and launches one adworker per rank. Stopping adctld
// (SIGTERM/SIGINT) leaves running jobs running: a restarted adctld re-attaches them.
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <tuple>

#include "common/data_dir_layout.h"
#include "common/logging.h"
#include "server/config/adctld_config.h"
#include "server/grpc/job_service.h"
#include "server/grpc/malformed_request.h"
#include "server/grpc/reflection_service.h"
#include "server/grpc/worker_service.h"
#include "server/http/http_server.h"
#include "server/launcher/launcher.h"
#include "server/launcher/shepherd.h"
#include "server/launcher/slurm_launcher.h"
#include "server/metrics/job_metrics.h"
#include "server/scheduler/device_inventory.h"
#include "server/store/store.h"
#include "server/supervisor/secrets.h"
#include "server/supervisor/supervisor.h"

namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

// "host:port" → (host, port); port 0 is resolved to a free port now, so the address can be
// handed to ranks before the gRPC server starts.
bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  *host = address.substr(0, colon);
  try {
    *port = std::stoi(address.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return *port >= 0 && *port < 65536;
}

// One adctld per data directory: an exclusive lock on <data>/adctld.lock for the daemon's life
// (released by the kernel however it ends). O_CLOEXEC: ranks it launches do not inherit it, so
// ranks that outlive a killed adctld do not keep its successor out. Returns the fd, or -1 with
// `error` naming the holder.
int LockDataDir(const std::string& data_dir, std::string* error) {
  const std::string path = adctl::DataDirLayout(data_dir).lock();
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    *error = "--data-dir " + data_dir + ": cannot open " + path + ": " + strerror(errno);
    return -1;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    *error = "--data-dir " + data_dir + ": another adctld" +
             (pid.empty() ? std::string() : " (pid " + pid + ")") +
             " already uses it; stop that one or pick another --data-dir";
    close(fd);
    return -1;
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    spdlog::warn("{}: cannot write the pid: {}", path, strerror(errno));
  }
  return fd;
}

// --on-stop pause: every job with ranks (or about to have them) is paused — its ranks checkpoint
// and exit — and adctld waits for them (each job's grace period, plus a margin) before it stops.
void DrainByPausing(adctl::Supervisor* supervisor, adctl::Store* store) {
  using adctl::JobState;
  auto active = store->ListActiveJobs();
  if (!active.ok()) {
    spdlog::error("drain: {}", active.status().message());
    return;
  }
  double wait_seconds = 10;
  int paused = 0;
  for (const adctl::JobRecord& j : active.value()) {
    if (j.state != JobState::kStarting && j.state != JobState::kRunning &&
        j.state != JobState::kRestarting) {
      continue;
    }
    auto r = supervisor->jobs().Pause(j.id, std::nullopt, "adctld (--on-stop pause)");
    if (!r.ok()) {
      spdlog::warn("drain: job {}: {}", j.id, r.status().message());
      continue;
    }
    ++paused;
    wait_seconds = std::max(wait_seconds, j.grace_seconds + 10);
  }
  spdlog::info("adctld stopping (--on-stop pause): pausing {} job(s), waiting up to {:.0f} s",
               paused, wait_seconds);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    auto left = store->ListActiveJobs();
    if (!left.ok()) break;
    const bool pausing = std::any_of(left->begin(), left->end(), [](const adctl::JobRecord& j) {
      return j.state == JobState::kPausing;
    });
    if (!pausing) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  spdlog::warn(
      "drain: jobs still pausing after {:.0f} s; their ranks stay and re-attach on the "
      "next start",
      wait_seconds);
}

bool IsLoopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]";
}

// The Unix socket (no tokens): adctld's user alone (0600), or with --socket-group its members
// too (0660, the data directory 0710 so that they can reach the socket but list nothing).
adctl::Status ShareSocket(const adctl::DataDirLayout& layout, const std::string& group_name) {
  const std::string path = layout.socket();
  if (group_name.empty()) {
    if (chmod(path.c_str(), 0600) != 0) {
      return adctl::Internal(path + ": cannot make it 0600: " + strerror(errno));
    }
    return adctl::Status::Ok();
  }
  const struct group* g = getgrnam(group_name.c_str());
  if (g == nullptr)
    return adctl::InvalidArgument("--socket-group " + group_name + ": no such group");
  if (chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0 ||
      chmod(path.c_str(), 0660) != 0 ||
      chown(layout.root.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0 ||
      chmod(layout.root.c_str(), 0710) != 0) {
    return adctl::Internal("--socket-group " + group_name + ": cannot give " + path +
                           " to the group: " + strerror(errno));
  }
  return adctl::Status::Ok();
}

// The owner token of the HTTP side (no tokens configured): <data-dir>/owner.token, made once
// (0600) and kept across restarts, so a browser that stored it stays signed in.
adctl::Result<std::string> OwnerToken(const adctl::DataDirLayout& layout) {
  const std::string path = layout.owner_token();
  {
    std::ifstream in(path);
    std::string token;
    if (in && std::getline(in, token) && token.size() == 32) return token;
  }
  const std::string token = adctl::RandomHex(16);
  const int fd = open((path + ".tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return adctl::Internal(path + ": cannot create: " + strerror(errno));
  const std::string line = token + "\n";
  const bool written = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  if (!written || rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    return adctl::Internal(path + ": cannot write: " + strerror(errno));
  }
  return token;
}

int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

int main(int argc, char** argv) {
  // A Slurm task's rank shepherd (the slurm launcher's batch script runs it on the nodes).
  if (argc > 1 && std::string(argv[1]) == "rank-shepherd") {
    return adctl::RankShepherdMain(argc, argv);
  }
  CLI::App app{
      "adctld — the adctl coordinator: queues AnimateDiff training jobs, runs their "
      "adworker ranks, keeps state in SQLite"};
  std::string listen;  // "": 127.0.0.1:50051 with tokens, the Unix socket without
  std::string socket_group;
  std::string http = "127.0.0.1:8080";
  std::string data_dir = "./adctl-data";
  std::string worker_binary;
  std::string advertise;
  std::string tokens_file;
  std::string on_stop = "detach";
  double retain_ended_hours = 0;
  int64_t metrics_max_points = 100000;
  std::string metrics_auth = "open";
  adctl::PathRoots path_roots;
  std::string tls_cert, tls_key, tls_client_ca, tls_ca;
  std::string static_dir = ADCTL_DEFAULT_STATIC_DIR;
  std::string log_level;
  int cpu_slots = 0;
  double restart_backoff = 1.0;
  std::string default_launcher = "local";
  adctl::SlurmOptions slurm;
  bool slurm_cpu = false;
  std::string worker_ifname;
  std::vector<std::string> worker_env;
  std::vector<std::string> webhook_urls;
  std::string webhook_secret_file;
  int webhook_attempts = 5;
  double webhook_backoff = 2;
  app.config_formatter(std::make_shared<adctl::YamlConfig>());
  app.allow_config_extras(CLI::config_extras_mode::error);  // a misspelt key is an error
  app.set_config("--config", "",
                 "adctld.yaml: the flags below as YAML keys (`slurm: {partition: gpu}` is "
                 "--slurm-partition gpu); command-line flags override it");
  app.add_option("--listen", listen,
                 "gRPC address host:port (port 0: a free port; default 127.0.0.1:50051). TCP "
                 "needs tokens: without them adctld serves gRPC only on <data-dir>/adctld.sock");
  app.add_option("--socket-group", socket_group,
                 "without tokens: members of this group may use <data-dir>/adctld.sock too "
                 "(0660; else 0600, adctld's user alone)");
  app.add_option("--http", http,
                 "HTTP address for /metrics, /healthz and the JSON API "
                 "(port 0: a free port; empty: off)")
      ->capture_default_str();
  app.add_option("--data-dir", data_dir, "state directory: adctl.db and jobs/<id>/")
      ->capture_default_str();
  app.add_option("--cpu-slots", cpu_slots,
                 "run ranks on N CPU slots instead of GPUs (default: the GPUs NVML finds, else 2)");
  app.add_option("--worker-binary", worker_binary,
                 "adworker to launch (default: next to adctld, then PATH)");
  app.add_option("--advertise,--worker-advertise-address", advertise,
                 "address ranks dial to reach this adctld (default: the --listen address, "
                 "0.0.0.0 replaced by 127.0.0.1); Slurm ranks on other nodes need a routable one");
  app.add_option("--launcher", default_launcher,
                 "where ranks of a job whose spec names no resources.launcher run: local | slurm")
      ->check(CLI::IsMember({"local", "slurm"}))
      ->capture_default_str();
  app.add_flag("--slurm", slurm.enabled,
               "enable the slurm launcher (each attempt one Slurm batch job; README \"Scaling "
               "out\")");
  app.add_option("--slurm-account", slurm.account, "default sbatch --account");
  app.add_option("--slurm-partition", slurm.partition, "default sbatch --partition");
  app.add_option("--slurm-qos", slurm.qos, "default sbatch --qos");
  app.add_option("--slurm-time-limit", slurm.time_limit, "default sbatch --time");
  app.add_option("--slurm-extra-arg", slurm.extra_args,
                 "one more sbatch flag for every slurm job (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--slurm-cpu", slurm_cpu,
               "Slurm ranks are CPU tasks (Gloo) instead of one GPU each (NCCL)");
  app.add_option("--slurm-cpus-per-task", slurm.cpus_per_task,
                 "sbatch/srun --cpus-per-task of CPU ranks (0: Slurm's default)");
  app.add_option("--slurm-bin-dir", slurm.bin_dir,
                 "folder of sbatch, squeue, scancel, scontrol (default: PATH)");
  app.add_option("--worker-ifname", worker_ifname,
                 "network interface ranks talk over: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME");
  app.add_option("--worker-env", worker_env,
                 "K=V added to every rank's environment unless adctld's own sets K (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--webhook", webhook_urls,
                 "URL told (JSON POST) when any job ends or has validation samples (repeatable; "
                 "docs/notifications.md)")
      ->allow_extra_args(false);
  app.add_option("--webhook-secret-file", webhook_secret_file,
                 "file whose contents sign every webhook body (X-Adctl-Signature: sha256=HMAC)");
  app.add_option("--webhook-attempts", webhook_attempts,
                 "tries per webhook delivery before it is given up (1-20)")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  app.add_option("--webhook-backoff", webhook_backoff,
                 "seconds before a failed webhook delivery's first retry; doubles each time")
      ->check(CLI::Range(0.0, 300.0))
      ->capture_default_str();
  app.add_option("--tokens-file", tokens_file,
                 "YAML list of {name, role: viewer|submitter|admin, sha256} tokens required on "
                 "every API call (README \"Access\"); env ADCTLD_TOKEN adds an admin token; with "
                 "neither, gRPC is served only on <data-dir>/adctld.sock and HTTP's JSON API "
                 "needs the token in <data-dir>/owner.token");
  bool owner_only = false;
  app.add_flag("--owner-only", owner_only,
               "a submitter token may cancel, pause, resume and export only the jobs it "
               "submitted (admins: any job; viewers: read every job)");
  app.add_option("--tls-cert", tls_cert,
                 "PEM certificate: serve gRPC and HTTP over TLS (with --tls-key)");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", tls_client_ca,
                 "PEM CA: clients must present a certificate it signed (mutual TLS)");
  app.add_option("--tls-ca", tls_ca,
                 "PEM CA the ranks verify adctld with (default: --tls-cert itself, for a "
                 "self-signed one)");
  app.add_option("--read-root", path_roots.read,
                 "a folder jobs may read models and data from (repeatable; none: anywhere)");
  app.add_option("--write-root", path_roots.write,
                 "a folder jobs may write checkpoint.dir / preprocess.output to (repeatable; "
                 "none: anywhere outside the data directory)");
  app.add_option("--metrics-auth", metrics_auth,
                 "'open': /metrics and /healthz need no token (Prometheus scrapes them); 'token': "
                 "they need a viewer's, like the JSON API")
      ->check(CLI::IsMember({"open", "token"}))
      ->capture_default_str();
  app.add_option("--retain-ended-hours", retain_ended_hours,
                 "remove the folder of a job that ended this many hours ago (its record and "
                 "metrics stay); 0: keep every folder")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--metrics-max-points", metrics_max_points,
                 "metric points kept per job and rank: over it, the older half of the series "
                 "thins out (recent steps keep every point); 0: keep every point")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--on-stop", on_stop,
                 "on SIGTERM/SIGINT: 'detach' leaves running ranks running (the next adctld "
                 "re-attaches them); 'pause' checkpoints every running job and leaves it PAUSED")
      ->check(CLI::IsMember({"detach", "pause"}))
      ->capture_default_str();
  app.add_option("--static-dir", static_dir,
                 "the web page's files (web/dist), served at / on the --http address")
      ->capture_default_str();
  app.add_option("--restart-backoff", restart_backoff, "seconds before a restart relaunches")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error (env ADCTL_LOG_LEVEL)");
  CLI11_PARSE(app, argc, argv);

  adctl::SetupLogging("adctld", log_level);
  std::vector<std::pair<std::string, std::string>> worker_env_pairs;
  for (const std::string& kv : worker_env) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      spdlog::error("--worker-env {}: expected K=V", kv);
      return 2;
    }
    worker_env_pairs.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (default_launcher == "slurm") slurm.enabled = true;
  slurm.gpus = !slurm_cpu;
  // Orphans of our ranks (e.g. a worker's own children after it died) are re-parented to us
  // and reaped by the supervisor, instead of lingering as zombies under a non-reaping init.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Tokens come from a file of hashes or the environment, never the command line (ps shows it).
  adctl::AccessPolicy access;
  if (!tokens_file.empty()) {
    auto loaded = adctl::AccessPolicy::FromFile(tokens_file);
    if (!loaded.ok()) {
      spdlog::error("{}", loaded.status().message());
      return 2;
    }
    access = std::move(loaded.value());
  }
  if (const char* t = getenv("ADCTLD_TOKEN"); t != nullptr && *t != '\0') {
    adctl::Status added = access.AddPlainToken("ADCTLD_TOKEN", adctl::Role::kAdmin, t);
    if (!added.ok()) {
      spdlog::error("{}", added.message());
      return 2;
    }
  }
  unsetenv("ADCTLD_TOKEN");  // ranks inherit adctld's environment
  if (owner_only) {
    if (!access.enabled()) {
      spdlog::error(
          "--owner-only needs tokens (--tokens-file or ADCTLD_TOKEN): without them "
          "every caller is adctld's own user");
      return 2;
    }
    access.LimitSubmittersToTheirOwnJobs();
  }

  // TLS: the PEM files are read now, so a wrong path fails the start naming the flag.
  struct {
    std::string cert, key, client_ca;
  } tls_pem;
  if (tls_cert.empty() != tls_key.empty()) {
    spdlog::error("--tls-cert and --tls-key: give both, or neither");
    return 2;
  }
  for (auto [flag, path, out] :
       {std::make_tuple("--tls-cert", &tls_cert, &tls_pem.cert),
        std::make_tuple("--tls-key", &tls_key, &tls_pem.key),
        std::make_tuple("--tls-client-ca", &tls_client_ca, &tls_pem.client_ca),
        std::make_tuple("--tls-ca", &tls_ca, static_cast<std::string*>(nullptr))}) {
    if (path->empty()) continue;
    std::error_code abs_ec;
    *path = std::filesystem::absolute(*path, abs_ec).string();
    std::ifstream in(*path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in || text.str().find("-----BEGIN ") == std::string::npos) {
      spdlog::error("{} {}: cannot be read as a PEM file", flag, *path);
      return 2;
    }
    if (out != nullptr) *out = text.str();
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    spdlog::error("--tls-client-ca needs --tls-cert and --tls-key");
    return 2;
  }

  std::error_code ec;
  std::filesystem::create_directories(adctl::DataDirLayout(data_dir).jobs(), ec);
  if (ec) {
    spdlog::error("--data-dir {}: {}", data_dir, ec.message());
    return 1;
  }
  data_dir = std::filesystem::canonical(data_dir).string();
  // Jobs' specs, logs, checkpoints and the database are the owner's alone.
  std::filesystem::permissions(data_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) spdlog::warn("--data-dir {}: cannot make it 0700: {}", data_dir, ec.message());
  std::string lock_error;
  const int lock_fd = LockDataDir(data_dir, &lock_error);
  if (lock_fd < 0) {
    spdlog::error("{}", lock_error);
    return 1;
  }
  const adctl::DataDirLayout layout(data_dir);

  // Where gRPC is served. Tokens: TCP (--listen). None: only the Unix socket in the data
  // directory, which only adctld's user (and --socket-group) may open; TCP is reachable by
  // every account on the machine, and without tokens anyone reaching it acts as adctld's user.
  const bool open_access = !access.enabled();
  if (open_access) {
    if (!listen.empty() || !advertise.empty()) {
      spdlog::warn(
          "{}{}: TCP needs tokens (--tokens-file or ADCTLD_TOKEN); without them gRPC is served "
          "only on {}",
          listen.empty() ? "" : "--listen " + listen, advertise.empty() ? "" : " --advertise",
          layout.socket());
    }
    ::unlink(layout.socket().c_str());  // a stale socket of an earlier adctld (we hold the lock)
    listen = layout.socket_target();
    advertise = listen;
  } else {
    if (listen.empty()) listen = "127.0.0.1:50051";
    std::string host;
    int port = 0;
    if (!SplitHostPort(listen, &host, &port)) {
      spdlog::error("--listen {}: expected host:port", listen);
      return 2;
    }
    if (port == 0) port = PickFreePort();
    listen = host + ":" + std::to_string(port);
    if (advertise.empty()) {
      advertise = (host == "0.0.0.0" || host == "[::]" || host.empty() ? "127.0.0.1" : host) + ":" +
                  std::to_string(port);
    }
    if (!socket_group.empty()) spdlog::warn("--socket-group: unused (tokens: gRPC is on TCP)");
  }
  // Run as root with no path roots, a job could name any file on the machine: its inputs and
  // outputs default to the data directory (README "Access"); --read-root/--write-root widen it.
  if (geteuid() == 0 && path_roots.read.empty() && path_roots.write.empty()) {
    path_roots.read = {data_dir};
    path_roots.write = {data_dir};
    spdlog::warn(
        "running as root without --read-root/--write-root: jobs may read and write only inside "
        "{} (never in another job's folder); name the folders jobs may use with --read-root and "
        "--write-root",
        data_dir);
  }

  auto worker = adctl::ResolveWorkerBinary(worker_binary);
  if (!worker.ok()) {
    // adctld still serves the API; jobs fail with this message when launched.
    spdlog::warn("{}", worker.status().message());
  }

  std::vector<adctl::Device> devices;
  if (cpu_slots > 0) {
    devices = adctl::CpuSlots(cpu_slots);
  } else if (auto gpus = adctl::ProbeNvml(); gpus.ok() && !gpus->empty()) {
    devices = gpus.value();
  } else {
    devices = adctl::CpuSlots(2);
    spdlog::info("no GPU found ({}); using 2 CPU slots (set --cpu-slots)",
                 gpus.ok() ? "NVML lists none" : gpus.status().message());
  }

  auto store = adctl::Store::Open(layout.database());
  if (!store.ok()) {
    spdlog::error("{}", store.status().ToString());
    return 1;
  }

  adctl::JobMetrics metrics(store->get());
  adctl::LocalLauncher launcher;
  std::unique_ptr<adctl::SlurmLauncher> slurm_launcher;
  if (slurm.enabled) {
    // The batch script runs this very binary as each task's shepherd (`adctld rank-shepherd`),
    // so it must be at the same path on the nodes (a shared install, like adworker).
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    slurm.shepherd = n > 0 ? std::string(self, static_cast<size_t>(n)) : argv[0];
    slurm_launcher = std::make_unique<adctl::SlurmLauncher>(slurm);
    adctl::Status answer = slurm_launcher->Check();
    if (!answer.ok()) {
      spdlog::error("--slurm: {} (is slurmctld up, and SLURM_CONF set?)", answer.message());
      return 2;
    }
    spdlog::info("slurm launcher on (partition {}, {} ranks)",
                 slurm.partition.empty() ? "default" : slurm.partition, slurm.gpus ? "GPU" : "CPU");
  }
  adctl::SupervisorOptions options;
  options.data_dir = data_dir;
  options.worker_binary = worker.ok()             ? worker.value()
                          : worker_binary.empty() ? "adworker"
                                                  : worker_binary;
  options.coordinator_address = advertise;
  options.devices = devices;
  options.restart_backoff_seconds = restart_backoff;
  options.metrics_max_points = metrics_max_points;
  options.paths = path_roots;
  // Ranks reach a tokenless adctld on its Unix socket, which is not TLS.
  if (!tls_cert.empty() && !open_access) options.tls_ca = tls_ca.empty() ? tls_cert : tls_ca;
  options.default_launcher = default_launcher;
  options.slurm = slurm;
  options.worker_ifname = worker_ifname;
  options.worker_env = worker_env_pairs;
  auto webhooks = adctl::LoadWebhookOptions(webhook_urls, webhook_secret_file, webhook_attempts,
                                            webhook_backoff);
  if (!webhooks.ok()) {
    spdlog::error("{}", webhooks.status().message());
    return 2;
  }
  options.webhooks = *webhooks;
  adctl::Supervisor supervisor(options, store->get(), &launcher, &metrics, adctl::SystemClock(),
                               slurm_launcher.get());
  metrics.AttachDevices(devices, [&supervisor] { return supervisor.monitor().Devices(); });

  adctl::JobQueries queries(store->get(), &supervisor);
  adctl::MotionExports exports(&queries, &supervisor.recorder());
  if (!tls_client_ca.empty() && !open_access) access.RequireClientCertificate();
  adctl::JobServiceImpl job_service(&supervisor.jobs(), &queries, &exports, &access);
  adctl::WorkerServiceImpl worker_service(&supervisor.workers());
  // What ranks kept in their job folder while adctld could not take it (killed ranks too).
  supervisor.monitor().SetAttemptEndedHook(
      [&worker_service](const adctl::JobRecord& job, int attempt, int world_size) {
        worker_service.DeliverPendingReports(job.job_dir, job.id, attempt, world_size);
      });
  std::shared_ptr<grpc::ServerCredentials> server_credentials = grpc::InsecureServerCredentials();
  if (!tls_cert.empty() && !open_access) {
    // Mutual TLS asks every client for a certificate and verifies any it gets, but requires
    // none at the handshake: ranks call WorkerService on their rank's token (a certificate per
    // rank would have to reach every node), while JobService and reflection refuse a caller
    // without a verified certificate (AccessPolicy::RequireClientCertificate).
    grpc::SslServerCredentialsOptions ssl(tls_client_ca.empty()
                                              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                              : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_key_cert_pairs.push_back({tls_pem.key, tls_pem.cert});
    ssl.pem_root_certs = tls_pem.client_ca;
    server_credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default on Linux, so a second daemon could share the port and take
  // half the calls; without it a taken port is an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Requests are small (a spec is at most 1 MiB); answers stream artifacts in 1 MiB chunks.
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(16 << 20);
  builder.experimental().SetInterceptorCreators(adctl::MalformedRequestInterceptors());
  int bound_port = 0;
  builder.AddListeningPort(listen, server_credentials, &bound_port);
  builder.RegisterService(&job_service);
  builder.RegisterService(&worker_service);
  // Reflection (v1 and v1alpha) with the JobService's access check.
  const std::vector<std::string> services = {adctl::v1::JobService::service_full_name(),
                                             adctl::v1::WorkerService::service_full_name()};
  adctl::ReflectionV1 reflection_v1(services, &access);
  adctl::ReflectionV1Alpha reflection_v1alpha(services, &access);
  builder.RegisterService(&reflection_v1);
  builder.RegisterService(&reflection_v1alpha);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    spdlog::error(
        "--listen {}: cannot listen for gRPC there (is the port taken, e.g. by another "
        "adctld?)",
        listen);
    return 1;
  }
  if (open_access) {
    adctl::Status shared = ShareSocket(layout, socket_group);
    if (!shared.ok()) {
      spdlog::error("{}", shared.message());
      return 2;
    }
  }

  // HTTP is TCP: without tokens configured, its JSON API needs the owner token adctld keeps
  // in <data-dir>/owner.token (the page asks for it once); /metrics and /healthz stay open
  // unless --metrics-auth token.
  adctl::AccessPolicy http_access = access;
  if (open_access) {
    auto owner = OwnerToken(layout);
    if (!owner.ok()) {
      spdlog::error("{}", owner.status().message());
      return 1;
    }
    adctl::Status added = http_access.AddPlainToken("owner", adctl::Role::kAdmin, owner.value());
    if (!added.ok()) {
      spdlog::error("{}", added.message());
      return 1;
    }
  }
  adctl::HttpOptions http_options;
  http_options.static_dir = static_dir;
  http_options.access = &http_access;
  http_options.metrics_need_token = metrics_auth == "token";
  http_options.tls_cert = tls_cert;
  http_options.tls_key = tls_key;
  http_options.tls_client_ca = tls_client_ca;
  http_options.exports = &exports;
  adctl::HttpServer http_server(&supervisor.jobs(), &queries, &metrics, http_options);
  std::string http_address;
  if (!http.empty()) {
    std::string http_host;
    int http_port = 0;
    if (!SplitHostPort(http, &http_host, &http_port)) {
      spdlog::error("--http {}: expected host:port", http);
      return 2;
    }
    if (open_access && !IsLoopback(http_host)) {
      spdlog::warn("--http {}: no tokens configured, so only loopback: listening on 127.0.0.1",
                   http);
      http_host = "127.0.0.1";
    }
    auto bound = http_server.Start(http_host, http_port);
    if (!bound.ok()) {
      spdlog::error("{}", bound.status().message());
      return 1;
    }
    http_address = http_host + ":" + std::to_string(bound.value());
  }

  adctl::Status started = supervisor.Start();
  if (!started.ok()) {
    spdlog::error("reconcile failed: {}", started.ToString());
    return 1;
  }

  // Where to find this adctld (scripts and tests read it).
  nlohmann::json info = {{"grpc", listen},
                         {"http", http_address},
                         {"pid", getpid()},
                         {"data_dir", data_dir},
                         {"worker_binary", options.worker_binary},
                         {"tls",
                          {{"grpc", !tls_cert.empty() && !open_access},
                           {"http", !tls_cert.empty() && !http_address.empty()},
                           {"client_certificates", !tls_client_ca.empty()}}},
                         {"tokens", !open_access}};
  {
    std::ofstream out(layout.info() + ".tmp");
    out << info.dump(2) << "\n";
  }
  std::filesystem::rename(layout.info() + ".tmp", layout.info(), ec);

  std::string unit = devices[0].kind == "gpu" ? "GPU(s)" : "CPU slot(s)";
  spdlog::info(
      "adctld listening: gRPC {} HTTP {}; {} {}; data {}; worker {}; access: {}", listen,
      http_address.empty() ? "off" : http_address, devices.size(), unit, data_dir,
      options.worker_binary,
      access.enabled()
          ? std::to_string(access.size()) + " token(s)" +
                (access.client_certificate_required()
                     ? std::string(" and a client certificate (ranks: their token)")
                     : std::string())
          : "no tokens: gRPC on the Unix socket only" +
                (socket_group.empty() ? std::string(" (adctld's user)")
                                      : " (adctld's user and group " + socket_group + ")") +
                ", HTTP's JSON API with the token in " + layout.owner_token());

  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  auto next_retention = std::chrono::steady_clock::now();
  auto next_thinning = next_retention;
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (metrics_max_points > 0 && std::chrono::steady_clock::now() >= next_thinning) {
      auto thinned = store->get()->ThinMetrics(std::max<int64_t>(4, metrics_max_points));
      if (!thinned.ok()) {
        spdlog::warn("metric history: {}", thinned.status().ToString());
      } else if (*thinned > 0) {
        spdlog::info("metric history: thinned {} old point(s) (--metrics-max-points {})", *thinned,
                     metrics_max_points);
      }
      next_thinning = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    }
    if (retain_ended_hours > 0 && std::chrono::steady_clock::now() >= next_retention) {
      const int removed = supervisor.jobs().RemoveEndedJobFolders(retain_ended_hours * 3600);
      if (removed > 0) spdlog::info("retention: removed {} ended job folder(s)", removed);
      next_retention = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    }
  }

  if (on_stop == "pause") {
    DrainByPausing(&supervisor, store->get());
  } else {
    spdlog::info("adctld stopping; running jobs keep running and re-attach on the next start");
  }
  supervisor.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  http_server.Stop();
  close(lock_fd);
  return 0;
}
