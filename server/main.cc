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
#include "server/config/adctld_flags.h"
#include "server/grpc/job_service.h"
#include "server/grpc/malformed_request.h"
#include "server/grpc/reflection_service.h"
#include "server/grpc/worker_service.h"
#include "server/http/http_server.h"
#include "server/launcher/launcher.h"
#include "server/launcher/launchers.h"
#include "server/launcher/shepherd.h"
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

// The data directory: created, made the owner's alone, and locked (one adctld per data
// directory). Returns the lock's descriptor, or -1 after logging why.
int OpenDataDir(adctl::AdctldFlags* f) {
  std::error_code ec;
  std::filesystem::create_directories(adctl::DataDirLayout(f->data_dir).jobs(), ec);
  if (ec) {
    spdlog::error("--data-dir {}: {}", f->data_dir, ec.message());
    return -1;
  }
  f->data_dir = std::filesystem::canonical(f->data_dir).string();
  // Jobs' specs, logs, checkpoints and the database are the owner's alone.
  std::filesystem::permissions(f->data_dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, ec);
  if (ec) spdlog::warn("--data-dir {}: cannot make it 0700: {}", f->data_dir, ec.message());
  std::string lock_error;
  const int lock_fd = LockDataDir(f->data_dir, &lock_error);
  if (lock_fd < 0) spdlog::error("{}", lock_error);
  return lock_fd;
}

// Where gRPC is served (f->listen) and what ranks dial (f->advertise). Tokens: TCP (--listen).
// None: only the Unix socket in the data directory, which only adctld's user (and
// --socket-group) may open; TCP is reachable by every account on the machine, and without
// tokens anyone reaching it acts as adctld's user. False after logging a bad --listen.
bool ChooseAddresses(adctl::AdctldFlags* f, bool open_access, const adctl::DataDirLayout& layout) {
  if (open_access) {
    if (!f->listen.empty() || !f->advertise.empty()) {
      spdlog::warn(
          "{}{}: TCP needs tokens (--tokens-file or ADCTLD_TOKEN); without them gRPC is served "
          "only on {}",
          f->listen.empty() ? "" : "--listen " + f->listen,
          f->advertise.empty() ? "" : " --advertise", layout.socket());
    }
    ::unlink(layout.socket().c_str());  // a stale socket of an earlier adctld (we hold the lock)
    f->listen = layout.socket_target();
    f->advertise = f->listen;
    return true;
  }
  if (f->listen.empty()) f->listen = "127.0.0.1:50051";
  std::string host;
  int port = 0;
  if (!SplitHostPort(f->listen, &host, &port)) {
    spdlog::error("--listen {}: expected host:port", f->listen);
    return false;
  }
  if (port == 0) port = PickFreePort();
  f->listen = host + ":" + std::to_string(port);
  if (f->advertise.empty()) {
    f->advertise = (host == "0.0.0.0" || host == "[::]" || host.empty() ? "127.0.0.1" : host) +
                   ":" + std::to_string(port);
  }
  if (!f->socket_group.empty()) spdlog::warn("--socket-group: unused (tokens: gRPC is on TCP)");
  return true;
}

// Run as root with no path roots, a job could name any file on the machine: its inputs and
// outputs default to the data directory (README "Access"); --read-root/--write-root widen it.
void DefaultPathRootsForRoot(adctl::AdctldFlags* f) {
  if (geteuid() != 0 || !f->path_roots.read.empty() || !f->path_roots.write.empty()) return;
  f->path_roots.read = {f->data_dir};
  f->path_roots.write = {f->data_dir};
  spdlog::warn(
      "running as root without --read-root/--write-root: jobs may read and write only inside "
      "{} (never in another job's folder); name the folders jobs may use with --read-root and "
      "--write-root",
      f->data_dir);
}

// --cpu-slots N, else the GPUs NVML finds, else 2 CPU slots.
std::vector<adctl::Device> FindDevices(int cpu_slots) {
  if (cpu_slots > 0) return adctl::CpuSlots(cpu_slots);
  auto gpus = adctl::ProbeNvml();
  if (gpus.ok() && !gpus->empty()) return gpus.value();
  spdlog::info("no GPU found ({}); using 2 CPU slots (set --cpu-slots)",
               gpus.ok() ? "NVML lists none" : gpus.status().message());
  return adctl::CpuSlots(2);
}

// This adctld's own binary, absolute (a Slurm task's rank shepherd runs it on the nodes).
std::string SelfExecutable(const char* argv0) {
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  return n > 0 ? std::string(self, static_cast<size_t>(n)) : argv0;
}

adctl::SupervisorOptions MakeSupervisorOptions(const adctl::AdctldFlags& f,
                                               const adctl::AdctldConfig& c,
                                               const std::vector<adctl::Device>& devices) {
  auto worker = adctl::ResolveWorkerBinary(f.worker_binary);
  if (!worker.ok()) {
    // adctld still serves the API; jobs fail with this message when launched.
    spdlog::warn("{}", worker.status().message());
  }
  adctl::SupervisorOptions options;
  options.data_dir = f.data_dir;
  options.worker_binary = worker.ok()               ? worker.value()
                          : f.worker_binary.empty() ? "adworker"
                                                    : f.worker_binary;
  options.coordinator_address = f.advertise;
  options.devices = devices;
  options.restart_backoff_seconds = f.restart_backoff;
  options.metrics_max_points = f.metrics_max_points;
  options.paths = f.path_roots;
  // Ranks reach a tokenless adctld on its Unix socket, which is not TLS.
  if (!f.tls_cert.empty() && !c.open_access) {
    options.tls_ca = f.tls_ca.empty() ? f.tls_cert : f.tls_ca;
  }
  options.worker_ifname = f.worker_ifname;
  options.worker_env = c.worker_env;
  options.webhooks = c.webhooks;
  return options;
}

std::shared_ptr<grpc::ServerCredentials> GrpcCredentials(const adctl::AdctldFlags& f,
                                                         const adctl::AdctldConfig& c) {
  if (f.tls_cert.empty() || c.open_access) return grpc::InsecureServerCredentials();
  // Mutual TLS asks every client for a certificate and verifies any it gets, but requires none
  // at the handshake: ranks call WorkerService on their rank's token (a certificate per rank
  // would have to reach every node), while JobService and reflection refuse a caller without a
  // verified certificate (AccessPolicy::RequireClientCertificate).
  grpc::SslServerCredentialsOptions ssl(f.tls_client_ca.empty()
                                            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  ssl.pem_key_cert_pairs.push_back({c.tls_key_pem, c.tls_cert_pem});
  ssl.pem_root_certs = c.tls_client_ca_pem;
  return grpc::SslServerCredentials(ssl);
}

// The gRPC server with the job and worker services and reflection (v1 and v1alpha, with the
// JobService's access check); null after logging why it cannot listen.
std::unique_ptr<grpc::Server> StartGrpc(const adctl::AdctldFlags& f, const adctl::AdctldConfig& c,
                                        const std::vector<grpc::Service*>& services) {
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default on Linux, so a second daemon could share the port and take
  // half the calls; without it a taken port is an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Requests are small (a spec is at most 1 MiB); answers stream artifacts in 1 MiB chunks.
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(16 << 20);
  builder.experimental().SetInterceptorCreators(adctl::MalformedRequestInterceptors());
  int bound_port = 0;
  builder.AddListeningPort(f.listen, GrpcCredentials(f, c), &bound_port);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    spdlog::error(
        "--listen {}: cannot listen for gRPC there (is the port taken, e.g. by another "
        "adctld?)",
        f.listen);
    return nullptr;
  }
  return server;
}

// HTTP is TCP: without tokens configured, its JSON API needs the owner token adctld keeps in
// <data-dir>/owner.token (the page asks for it once); /metrics and /healthz stay open unless
// --metrics-auth token. Sets the address it serves on ("" : --http off); returns 0, or the exit
// code after logging why not.
int StartHttp(const adctl::AdctldFlags& f, bool open_access, adctl::HttpServer* http_server,
              std::string* address) {
  if (f.http.empty()) return 0;
  std::string host;
  int port = 0;
  if (!SplitHostPort(f.http, &host, &port)) {
    spdlog::error("--http {}: expected host:port", f.http);
    return 2;
  }
  if (open_access && !IsLoopback(host)) {
    spdlog::warn("--http {}: no tokens configured, so only loopback: listening on 127.0.0.1",
                 f.http);
    host = "127.0.0.1";
  }
  auto bound = http_server->Start(host, port);
  if (!bound.ok()) {
    spdlog::error("{}", bound.status().message());
    return 1;
  }
  *address = host + ":" + std::to_string(bound.value());
  return 0;
}

// <data-dir>/adctld.json: where to find this adctld (scripts and tests read it).
void WriteInfo(const adctl::AdctldFlags& f, const adctl::AdctldConfig& c,
               const adctl::SupervisorOptions& options, const std::string& http_address,
               const adctl::DataDirLayout& layout) {
  nlohmann::json info = {{"grpc", f.listen},
                         {"http", http_address},
                         {"pid", getpid()},
                         {"data_dir", f.data_dir},
                         {"worker_binary", options.worker_binary},
                         {"tls",
                          {{"grpc", !f.tls_cert.empty() && !c.open_access},
                           {"http", !f.tls_cert.empty() && !http_address.empty()},
                           {"client_certificates", !f.tls_client_ca.empty()}}},
                         {"tokens", !c.open_access}};
  {
    std::ofstream out(layout.info() + ".tmp");
    out << info.dump(2) << "\n";
  }
  std::error_code ec;
  std::filesystem::rename(layout.info() + ".tmp", layout.info(), ec);

  const std::string unit = options.devices[0].kind == "gpu" ? "GPU(s)" : "CPU slot(s)";
  const adctl::AccessPolicy& access = c.access;
  spdlog::info(
      "adctld listening: gRPC {} HTTP {}; {} {}; data {}; worker {}; access: {}", f.listen,
      http_address.empty() ? "off" : http_address, options.devices.size(), unit, f.data_dir,
      options.worker_binary,
      access.enabled()
          ? std::to_string(access.size()) + " token(s)" +
                (access.client_certificate_required()
                     ? std::string(" and a client certificate (ranks: their token)")
                     : std::string())
          : "no tokens: gRPC on the Unix socket only" +
                (f.socket_group.empty() ? std::string(" (adctld's user)")
                                        : " (adctld's user and group " + f.socket_group + ")") +
                ", HTTP's JSON API with the token in " + layout.owner_token());
}

// Until SIGTERM or SIGINT: thins the metric history every minute and removes ended jobs'
// folders every 30 s (--retain-ended-hours).
void ServeUntilSignal(const adctl::AdctldFlags& f, adctl::Store* store,
                      adctl::Supervisor* supervisor) {
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  auto next_retention = std::chrono::steady_clock::now();
  auto next_thinning = next_retention;
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (f.metrics_max_points > 0 && std::chrono::steady_clock::now() >= next_thinning) {
      auto thinned = store->ThinMetrics(std::max<int64_t>(4, f.metrics_max_points));
      if (!thinned.ok()) {
        spdlog::warn("metric history: {}", thinned.status().ToString());
      } else if (*thinned > 0) {
        spdlog::info("metric history: thinned {} old point(s) (--metrics-max-points {})", *thinned,
                     f.metrics_max_points);
      }
      next_thinning = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    }
    if (f.retain_ended_hours > 0 && std::chrono::steady_clock::now() >= next_retention) {
      const int removed = supervisor->jobs().RemoveEndedJobFolders(f.retain_ended_hours * 3600);
      if (removed > 0) spdlog::info("retention: removed {} ended job folder(s)", removed);
      next_retention = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    }
  }
}

}  // namespace

// Flags → config → wiring → serve.
int main(int argc, char** argv) {
  // A Slurm task's rank shepherd (the slurm launcher's batch script runs it on the nodes).
  if (argc > 1 && std::string(argv[1]) == "rank-shepherd") {
    return adctl::RankShepherdMain(argc, argv);
  }
  CLI::App app{
      "adctld — the adctl coordinator: queues AnimateDiff training jobs, runs their "
      "adworker ranks, keeps state in SQLite"};
  adctl::AdctldFlags flags;
  flags.static_dir = ADCTL_DEFAULT_STATIC_DIR;
  adctl::AddAdctldFlags(&app, &flags);
  CLI11_PARSE(app, argc, argv);
  adctl::SetupLogging("adctld", flags.log_level);
  auto config = adctl::LoadAdctldConfig(&flags);
  if (!config.ok()) {
    spdlog::error("{}", config.status().message());
    return 2;
  }
  // Orphans of our ranks (e.g. a worker's own children after it died) are re-parented to us
  // and reaped by the supervisor, instead of lingering as zombies under a non-reaping init.
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  const int lock_fd = OpenDataDir(&flags);
  if (lock_fd < 0) return 1;
  const adctl::DataDirLayout layout(flags.data_dir);
  if (!ChooseAddresses(&flags, config->open_access, layout)) return 2;
  DefaultPathRootsForRoot(&flags);
  const std::vector<adctl::Device> devices = FindDevices(flags.cpu_slots);

  // Wiring.
  auto store = adctl::Store::Open(layout.database());
  if (!store.ok()) {
    spdlog::error("{}", store.status().ToString());
    return 1;
  }
  adctl::JobMetrics metrics(store->get());
  // The launchers, one per kind turned on (server/launcher/launchers.h).
  adctl::Launchers launchers;
  auto started_launchers =
      adctl::StartLaunchers(flags.launcher_plugins,
                            adctl::SpecEnumValue<adctl::LauncherKind>(flags.default_launcher)
                                .value_or(adctl::LauncherKind::kLocal),
                            {SelfExecutable(argv[0])}, &launchers);
  if (!started_launchers.ok()) {
    spdlog::error("{}", started_launchers.status().message());
    return 2;
  }
  const adctl::SupervisorOptions options = MakeSupervisorOptions(flags, *config, devices);
  adctl::Supervisor supervisor(options, store->get(), launchers, &metrics);
  metrics.AttachDevices(devices, [&supervisor] { return supervisor.monitor().Devices(); });
  adctl::JobQueries queries(store->get(), &supervisor);
  adctl::MotionExports exports(&queries, &supervisor.recorder());
  adctl::AccessPolicy& access = config->access;
  if (!flags.tls_client_ca.empty() && !config->open_access) access.RequireClientCertificate();
  adctl::JobServiceImpl job_service(&supervisor.jobs(), &queries, &exports, &access);
  adctl::WorkerServiceImpl worker_service(&supervisor.workers());
  // What ranks kept in their job folder while adctld could not take it (killed ranks too).
  supervisor.monitor().SetAttemptEndedHook(
      [&worker_service](const adctl::JobRecord& job, int attempt, int world_size) {
        worker_service.DeliverPendingReports(job.job_dir, job.id, attempt, world_size);
      });
  const std::vector<std::string> service_names = {adctl::v1::JobService::service_full_name(),
                                                  adctl::v1::WorkerService::service_full_name()};
  adctl::ReflectionV1 reflection_v1(service_names, &access);
  adctl::ReflectionV1Alpha reflection_v1alpha(service_names, &access);

  // Serve.
  std::unique_ptr<grpc::Server> server = StartGrpc(
      flags, *config, {&job_service, &worker_service, &reflection_v1, &reflection_v1alpha});
  if (!server) return 1;
  if (config->open_access) {
    adctl::Status shared = ShareSocket(layout, flags.socket_group);
    if (!shared.ok()) {
      spdlog::error("{}", shared.message());
      return 2;
    }
  }
  adctl::AccessPolicy http_access = access;
  if (config->open_access) {
    auto owner = OwnerToken(layout);
    adctl::Status added =
        owner.ok() ? http_access.AddPlainToken("owner", adctl::Role::kAdmin, owner.value())
                   : owner.status();
    if (!added.ok()) {
      spdlog::error("{}", added.message());
      return 1;
    }
  }
  adctl::HttpOptions http_options;
  http_options.static_dir = flags.static_dir;
  http_options.access = &http_access;
  http_options.metrics_need_token = flags.metrics_auth == "token";
  http_options.tls_cert = flags.tls_cert;
  http_options.tls_key = flags.tls_key;
  http_options.tls_client_ca = flags.tls_client_ca;
  http_options.exports = &exports;
  adctl::HttpServer http_server(&supervisor.jobs(), &queries, &metrics, http_options);
  std::string http_address;
  if (int rc = StartHttp(flags, config->open_access, &http_server, &http_address); rc != 0) {
    return rc;
  }
  adctl::Status started = supervisor.Start();
  if (!started.ok()) {
    spdlog::error("reconcile failed: {}", started.ToString());
    return 1;
  }
  WriteInfo(flags, *config, options, http_address, layout);
  ServeUntilSignal(flags, store->get(), &supervisor);

  if (flags.on_stop == "pause") {
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
