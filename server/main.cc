// adctld: the adctl coordinator daemon.
//
// Owns the SQLite state under --data-dir, serves adctl.v1.JobService and WorkerService over
// gRPC (with server reflection), /metrics + /healthz + the web page and its JSON API over HTTP
// (server/http/http_server.h), and launches one adworker per rank. Stopping adctld
// (SIGTERM/SIGINT) leaves running jobs running: a restarted adctld re-attaches them.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/logging.h"
#include "server/grpc/job_service.h"
#include "server/grpc/worker_service.h"
#include "server/http/http_server.h"
#include "server/launcher/launcher.h"
#include "server/metrics/job_metrics.h"
#include "server/scheduler/device_inventory.h"
#include "server/store/store.h"
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
  CLI::App app{
      "adctld — the adctl coordinator: queues AnimateDiff training jobs, runs their "
      "adworker ranks, keeps state in SQLite"};
  std::string listen = "127.0.0.1:50051";
  std::string http = "127.0.0.1:8080";
  std::string data_dir = "./adctl-data";
  std::string worker_binary;
  std::string advertise;
  std::string token;
  std::string static_dir = ADCTL_DEFAULT_STATIC_DIR;
  std::string log_level;
  int cpu_slots = 0;
  double restart_backoff = 1.0;
  app.add_option("--listen", listen, "gRPC address host:port (port 0: a free port)")
      ->capture_default_str();
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
  app.add_option("--advertise", advertise,
                 "address ranks dial to reach this adctld (default: the --listen address, "
                 "0.0.0.0 replaced by 127.0.0.1)");
  app.add_option("--token", token,
                 "require this bearer token on JobService calls and the HTTP JSON API (default: "
                 "env ADCTLD_TOKEN; empty: no token)");
  app.add_option("--static-dir", static_dir,
                 "the web page's files (web/dist), served at / on the --http address")
      ->capture_default_str();
  app.add_option("--restart-backoff", restart_backoff, "seconds before a restart relaunches")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error (env ADCTL_LOG_LEVEL)");
  CLI11_PARSE(app, argc, argv);

  adctl::SetupLogging("adctld", log_level);
  // Orphans of our ranks (e.g. a worker's own children after it died) are re-parented to us
  // and reaped by the supervisor, instead of lingering as zombies under a non-reaping init.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (token.empty()) {
    if (const char* t = getenv("ADCTLD_TOKEN")) token = t;
  }

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

  std::error_code ec;
  std::filesystem::create_directories(data_dir + "/jobs", ec);
  if (ec) {
    spdlog::error("--data-dir {}: {}", data_dir, ec.message());
    return 1;
  }
  data_dir = std::filesystem::canonical(data_dir).string();

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

  auto store = adctl::Store::Open(data_dir + "/adctl.db");
  if (!store.ok()) {
    spdlog::error("{}", store.status().ToString());
    return 1;
  }

  adctl::JobMetrics metrics(store->get());
  adctl::LocalLauncher launcher;
  adctl::SupervisorOptions options;
  options.data_dir = data_dir;
  options.worker_binary = worker.ok()             ? worker.value()
                          : worker_binary.empty() ? "adworker"
                                                  : worker_binary;
  options.coordinator_address = advertise;
  options.devices = devices;
  options.restart_backoff_seconds = restart_backoff;
  adctl::Supervisor supervisor(options, store->get(), &launcher, &metrics);
  metrics.AttachDevices(devices, [&supervisor] { return supervisor.monitor().Devices(); });

  adctl::JobQueries queries(store->get(), &supervisor);
  adctl::MotionExports exports(&queries);
  adctl::JobServiceImpl job_service(&supervisor.jobs(), &queries, &exports, token);
  adctl::WorkerServiceImpl worker_service(&supervisor.workers());
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &bound_port);
  builder.RegisterService(&job_service);
  builder.RegisterService(&worker_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    spdlog::error("cannot listen for gRPC on {}", listen);
    return 1;
  }

  adctl::HttpServer http_server(&supervisor.jobs(), &queries, &metrics,
                                adctl::HttpOptions{static_dir, token});
  std::string http_address;
  if (!http.empty()) {
    std::string http_host;
    int http_port = 0;
    if (!SplitHostPort(http, &http_host, &http_port)) {
      spdlog::error("--http {}: expected host:port", http);
      return 2;
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
                         {"worker_binary", options.worker_binary}};
  {
    std::ofstream out(data_dir + "/adctld.json.tmp");
    out << info.dump(2) << "\n";
  }
  std::filesystem::rename(data_dir + "/adctld.json.tmp", data_dir + "/adctld.json", ec);

  std::string unit = devices[0].kind == "gpu" ? "GPU(s)" : "CPU slot(s)";
  spdlog::info("adctld listening: gRPC {} HTTP {}; {} {}; data {}; worker {}", listen,
               http_address.empty() ? "off" : http_address, devices.size(), unit, data_dir,
               options.worker_binary);

  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));

  spdlog::info("adctld stopping; running jobs keep running and re-attach on the next start");
  supervisor.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  http_server.Stop();
  return 0;
}
