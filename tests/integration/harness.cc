#include "tests/integration/harness.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "server/launcher/process.h"

namespace adctl::testing {

namespace fs = std::filesystem;

std::string AdctldPath() { return ADCTL_TEST_ADCTLD; }
std::string AdctlPath() { return ADCTL_TEST_ADCTL; }
std::string AdworkerPath() {
  // An override lets a developer point at an adworker built elsewhere.
  if (const char* env = getenv("ADCTL_TEST_ADWORKER"); env && *env) return env;
  return ADCTL_TEST_ADWORKER;
}

bool HaveAdworker() {
  const std::string path = AdworkerPath();
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

bool PidAlive(int pid) { return pid > 0 && ProcessAlive(pid, 0); }
bool GroupAlive(int pgid) { return pgid > 1 && ProcessGroupExists(pgid); }

std::string TinyJobSpec(const std::string& name, int steps, const std::string& resources) {
  return "name: " + name +
         "\n"
         "model: {preset: tiny}\n"
         "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
         "train: {max_steps: " +
         std::to_string(steps) +
         ", batch_size: 1}\n"
         "checkpoint: {every_steps: 2, keep_last: 2}\n"
         "resources: {" +
         resources + "}\n";
}

int64_t Step(const nlohmann::json& job) {
  return job.contains("progress") ? std::stoll(job["progress"].value("step", "0")) : 0;
}

int64_t CheckpointStep(const nlohmann::json& job) {
  return job.contains("progress") ? std::stoll(job["progress"].value("last_checkpoint_step", "0"))
                                  : 0;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

Coordinator::Coordinator(int cpu_slots, std::string token)
    : cpu_slots_(cpu_slots), token_(std::move(token)) {
  // Under /tmp whatever $TMPDIR says: adctld's Unix socket lives in it (a short path), and the
  // tests that act as another local user must reach it.
  std::string error;
  tmp_ = TempDir::TryMake("/tmp", &error);
  if (tmp_ == nullptr) throw std::runtime_error(error);
  dir_ = tmp_->path();
}

Coordinator::~Coordinator() {
  if (pid_ > 0) {
    // Leave nothing behind: cancel every non-terminal job, then stop adctld.
    auto jobs = Adctl({"-o", "json", "ls"});
    if (jobs.exit_code == 0) {
      auto j = nlohmann::json::parse(jobs.out, nullptr, false);
      if (j.is_object() && j.contains("jobs")) {
        for (const auto& job : j["jobs"]) {
          std::string state = job.value("state", "");
          if (state != "JOB_STATE_SUCCEEDED" && state != "JOB_STATE_FAILED" &&
              state != "JOB_STATE_CANCELLED") {
            Adctl({"cancel", job["id"].get<std::string>(), "--force"});
            Adctl({"wait", job["id"].get<std::string>(), "--timeout", "20"});
          }
        }
      }
    }
    Stop();
  }
  // tmp_ removes the directory (unless ADCTL_TEST_KEEP is set).
}

void Coordinator::Start() {
  fs::remove(dir_ + "/data/adctld.json");
  fs::create_directories(dir_ + "/data");
  pid_ = fork();
  if (pid_ == 0) {
    std::string log = dir_ + "/adctld.log";
    FILE* f = freopen(log.c_str(), "a", stderr);
    (void)f;
    dup2(2, 1);
    std::string slots = std::to_string(cpu_slots_);
    std::string data = dir_ + "/data";
    std::string worker = AdworkerPath();
    // A restart reuses the addresses: ranks that outlived adctld dial the same one.
    std::string listen = grpc_.empty() ? "127.0.0.1:0" : grpc_;
    std::string http = http_.empty() ? "127.0.0.1:0" : http_;
    // The token travels in the environment (ADCTLD_TOKEN), as a deployment would pass it.
    if (!token_.empty()) setenv("ADCTLD_TOKEN", token_.c_str(), 1);
    std::vector<std::string> args = {"adctld", "--data-dir",      data,   "--listen",
                                     listen,   "--http",          http,   "--cpu-slots",
                                     slots,    "--worker-binary", worker, "--restart-backoff",
                                     "0.2"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    // As root without path roots adctld confines jobs to its data directory; the tests name
    // fixtures and temporary folders anywhere, unless a test sets roots of its own.
    const bool roots = std::any_of(args.begin(), args.end(), [](const std::string& a) {
      return a == "--read-root" || a == "--write-root";
    });
    if (geteuid() == 0 && !roots) {
      for (const char* flag : {"--read-root", "--write-root"}) {
        args.push_back(flag);
        args.push_back("/");
      }
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(AdctldPath().c_str(), argv.data());
    _exit(127);
  }
  for (int i = 0; i < 600; ++i) {  // 30 s: a loaded test machine
    std::ifstream in(dir_ + "/data/adctld.json");
    if (in) {
      auto info = nlohmann::json::parse(in, nullptr, false);
      if (info.is_object() && info.value("pid", 0) == pid_) {
        grpc_ = info["grpc"];
        http_ = info["http"];
        if (Adctl({"gpus"}).exit_code == 0) return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL() << "adctld did not start; log:\n" << ReadFile(dir_ + "/adctld.log");
}

void Coordinator::Kill9() {
  ASSERT_GT(pid_, 0);
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = 0;
}

void Coordinator::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = 0;
}

CommandResult Coordinator::Adctl(const std::vector<std::string>& args) const {
  std::vector<std::string> all;
  if (std::find(args.begin(), args.end(), "--server") == args.end()) {
    all = {"--server", grpc_};
  }
  all.insert(all.end(), args.begin(), args.end());
  return Run(AdctlPath(), all);
}

CommandResult Coordinator::Run(const std::string& program,
                               const std::vector<std::string>& args) const {
  static std::atomic<int> counter{0};  // commands may run from several threads
  const std::string base =
      dir_ + "/cmd-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  std::string cmd = token_.empty() ? "" : "ADCTL_TOKEN=" + ShellQuote(token_) + " ";
  if (!client_env_.empty()) cmd += "env ";
  for (const std::string& assignment : client_env_) cmd += ShellQuote(assignment) + " ";
  cmd += ShellQuote(program);
  for (const auto& a : args) cmd += " " + ShellQuote(a);
  cmd += " > " + base + ".out 2> " + base + ".err";
  int status = system(cmd.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(base + ".out");
  r.err = ReadFile(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return r;
}

nlohmann::json Coordinator::AdctlJson(const std::vector<std::string>& args) const {
  std::vector<std::string> full = {"-o", "json"};
  full.insert(full.end(), args.begin(), args.end());
  CommandResult r = Adctl(full);
  EXPECT_EQ(r.exit_code, 0) << "adctl failed: " << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

std::string Coordinator::WriteSpec(const std::string& name, const std::string& yaml) const {
  std::string path = dir_ + "/" + name + ".yaml";
  std::ofstream(path) << yaml;
  return path;
}

std::string Coordinator::Submit(const std::string& spec_path,
                                const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"submit", spec_path};
  args.insert(args.end(), extra.begin(), extra.end());
  auto j = AdctlJson(args);
  return j["job"]["id"].get<std::string>();
}

nlohmann::json Coordinator::Describe(const std::string& id) const {
  return AdctlJson({"describe", id});
}

nlohmann::json Coordinator::WaitState(const std::string& id, const std::string& state,
                                      double seconds) const {
  return WaitUntil(
      id, [&](const nlohmann::json& j) { return j.value("state", "") == "JOB_STATE_" + state; },
      seconds, state);
}

std::string Coordinator::HttpGet(const std::string& path) const {
  HttpReply reply = Http("GET", path);
  return reply.status == 200 ? reply.body : "";
}

HttpReply Coordinator::Http(const std::string& method, const std::string& path,
                            const std::string& body) const {
  return HttpWithAuthorization(method, path, "Bearer " + HttpToken(), body);
}

std::string Coordinator::HttpToken() const {
  if (!token_.empty()) return token_;
  // Without tokens adctld's HTTP side takes the owner token it keeps in its data directory.
  std::ifstream in(dir_ + "/data/owner.token");
  std::string owner;
  std::getline(in, owner);
  return owner;
}

HttpReply Coordinator::HttpWithAuthorization(const std::string& method, const std::string& path,
                                             const std::string& authorization,
                                             const std::string& body) const {
  httplib::Client client("http://" + http_);
  client.set_read_timeout(90, 0);  // long polls
  httplib::Headers headers;
  if (!authorization.empty()) headers.emplace("Authorization", authorization);
  auto res = method == "POST" ? client.Post(path.c_str(), headers, body, "application/json")
                              : client.Get(path.c_str(), headers);
  HttpReply reply;
  if (!res) return reply;
  reply.status = res->status;
  reply.body = res->body;
  reply.json = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return reply;
}

}  // namespace adctl::testing
