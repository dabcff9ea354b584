// adctld's HTTP JSON API end to end: a real adctld (temp dir, free ports) and, for the tests
// that train, the real adworker on a tiny preset model. Covers what the web page relies on:
// downsampled metric history, the long poll, following a rank log, checkpoints, the commands,
// the error statuses and the bearer token.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/sha256.h"
#include "tests/integration/harness.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A job that runs until cancelled: tiny steps, a checkpoint every 2.
const char* kLongSpec =
    "name: http\n"
    "model: {preset: tiny}\n"
    "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
    "train: {max_steps: 100000, batch_size: 1}\n"
    "checkpoint: {every_steps: 2, keep_last: 2}\n"
    "resources: {gpus: 1, grace_seconds: 20}\n";

int64_t AsInt(const nlohmann::json& v) {
  return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The error body: {"error": CODE, "message": "..."}.
void ExpectError(const HttpReply& r, int status, const std::string& code) {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_TRUE(r.json.is_object()) << r.body;
  EXPECT_EQ(r.json.value("error", ""), code) << r.body;
  EXPECT_FALSE(r.json.value("message", "").empty()) << r.body;
}

// A TCP connection to host:port ("" when it cannot connect); -1 on failure.
int Connect(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& text) {
  return send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// Whether the server closed (or reset) the connection: reading what it sent (an error answer,
// if any) finds EOF or an error now.
bool ClosedByServer(int fd) {
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) continue;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

int ThreadCount(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

// 200 slowloris sockets (a header line every second, never the blank line) do not stop the
// HTTP side: /healthz and /metrics keep answering, and each slow socket is closed once its
// request has taken 10 s. Bodies over 1 MiB are answered 413 unread.
TEST(HttpApiTest, SlowClientsCannotStopIt) {
  Coordinator c(1);
  c.Start();
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    const int fd = Connect(c.http_address());
    ASSERT_GE(fd, 0) << "connection " << i;
    ASSERT_TRUE(SendAll(fd, "GET /healthz HTTP/1.1\r\nHost: adctl\r\n"));
    slow.push_back(fd);
  }
  const auto start = Clock::now();
  int answered = 0;
  while (SecondsSince(start) < 8) {
    for (int fd : slow) SendAll(fd, "X-Slow: 1\r\n");
    const auto asked = Clock::now();
    EXPECT_EQ(c.Http("GET", "/healthz").status, 200);
    EXPECT_EQ(c.Http("GET", "/metrics").status, 200);
    EXPECT_LT(SecondsSince(asked), 2.0) << "answers wait behind the slow sockets";
    ++answered;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  EXPECT_GE(answered, 5);
  // By 10 s (and a watchdog period) every slow socket is closed by adctld.
  int closed = 0;
  while (SecondsSince(start) < 16 && closed < static_cast<int>(slow.size())) {
    closed = 0;
    for (int fd : slow) {
      SendAll(fd, "X-Slow: 1\r\n");
      closed += ClosedByServer(fd) ? 1 : 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(closed, static_cast<int>(slow.size()));
  for (int fd : slow) close(fd);

  // A body over the limit: 413, without adctld reading (or keeping) it.
  const int big = Connect(c.http_address());
  ASSERT_GE(big, 0);
  ASSERT_TRUE(SendAll(big,
                      "POST /api/v1/jobs/j-1/cancel HTTP/1.1\r\nHost: adctl\r\nAuthorization: "
                      "Bearer " +
                          c.HttpToken() +
                          "\r\nContent-Type: application/json\r\nContent-Length: "
                          "1073741824\r\n\r\n{"));
  std::string answer(512, '\0');
  timeval tv{8, 0};  // answered at once; the watchdog would shut it at 10 s
  setsockopt(big, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const ssize_t n = recv(big, answer.data(), answer.size(), 0);
  close(big);
  ASSERT_GT(n, 0);
  EXPECT_EQ(answer.rfind("HTTP/1.1 413", 0), 0u) << answer.substr(0, static_cast<size_t>(n));
}

// Long polls whose clients left end at once, not at their timeout: adctld's threads come back.
TEST(HttpApiTest, LongPollsWhoseClientsLeftEnd) {
  if (!HaveAdworker()) GTEST_SKIP() << "needs adworker";
  Coordinator c(1);
  c.Start();
  const std::string id = c.Submit(c.WriteSpec("poll", kLongSpec));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const int before = ThreadCount(c.pid());
  ASSERT_GT(before, 0);
  std::vector<int> polls;
  for (int i = 0; i < 100; ++i) {
    const int fd = Connect(c.http_address());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendAll(fd, "GET /api/v1/jobs/" + id +
                                "/updates?after_event=999999999&after_metric=999999999&"
                                "timeout_ms=60000 HTTP/1.1\r\nHost: adctl\r\nAuthorization: "
                                "Bearer " +
                                c.HttpToken() + "\r\n\r\n"));
    polls.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_GE(ThreadCount(c.pid()), before + 90) << "a long poll holds its connection's thread";
  for (int fd : polls) close(fd);
  const auto left = Clock::now();
  while (SecondsSince(left) < 5 && ThreadCount(c.pid()) > before + 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_LE(ThreadCount(c.pid()), before + 10) << "long polls outlived their clients";
  EXPECT_LT(SecondsSince(left), 5.0);
  EXPECT_EQ(c.Http("GET", "/healthz").status, 200);
  c.Adctl({"cancel", id, "--force"});
}

TEST(HttpApiTest, TokenGuardsTheJsonApiButNotMetricsOrHealth) {
  Coordinator c(1, "s3cret-admin");
  // Two more tokens with roles, as hashes in a tokens file (README "Access").
  const std::string tokens = c.dir() + "/tokens.yaml";
  {
    std::ofstream out(tokens);
    out << "tokens:\n  - {name: grafana, role: viewer, sha256: "
        << Sha256Hex(std::string("s3cret-viewer"))
        << "}\n  - {name: ci, role: submitter, sha256: " << Sha256Hex(std::string("s3cret-submit"))
        << "}\n";
  }
  c.SetExtraArgs({"--tokens-file", tokens});
  c.Start();
  const HttpReply none = c.HttpWithAuthorization("GET", "/api/v1/jobs", "");
  ExpectError(none, 401, "UNAUTHENTICATED");
  EXPECT_NE(none.json.value("message", "").find("Authorization: Bearer"), std::string::npos)
      << none.body;
  const HttpReply wrong = c.HttpWithAuthorization("GET", "/api/v1/jobs", "Bearer nope");
  ExpectError(wrong, 401, "UNAUTHENTICATED");
  EXPECT_NE(wrong.json.value("message", "").find("unknown token"), std::string::npos) << wrong.body;
  // A bare token is taken as gRPC takes it; another scheme is refused saying so.
  EXPECT_EQ(c.HttpWithAuthorization("GET", "/api/v1/jobs", "s3cret-admin").status, 200);
  ExpectError(c.HttpWithAuthorization("GET", "/api/v1/jobs", "Basic s3cret-admin"), 401,
              "UNAUTHENTICATED");
  // Commands are guarded too, before the job is even looked up.
  ExpectError(c.HttpWithAuthorization("POST", "/api/v1/jobs/j-none/cancel", ""), 401,
              "UNAUTHENTICATED");

  const HttpReply ok = c.HttpWithAuthorization("GET", "/api/v1/jobs", "Bearer s3cret-admin");
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_TRUE(ok.json.contains("jobs")) << ok.body;
  EXPECT_EQ(c.HttpWithAuthorization("GET", "/api/v1/devices", "Bearer s3cret-admin").status, 200);
  // Roles: a viewer reads but a command is 403 naming the role needed; a submitter passes the
  // check (and then finds no such job).
  EXPECT_EQ(c.HttpWithAuthorization("GET", "/api/v1/jobs", "Bearer s3cret-viewer").status, 200);
  const HttpReply denied =
      c.HttpWithAuthorization("POST", "/api/v1/jobs/j-none/cancel", "Bearer s3cret-viewer");
  ExpectError(denied, 403, "PERMISSION_DENIED");
  EXPECT_NE(denied.json.value("message", "").find("this needs submitter"), std::string::npos)
      << denied.body;
  ExpectError(c.HttpWithAuthorization("POST", "/api/v1/jobs/j-none/cancel", "Bearer s3cret-submit"),
              404, "NOT_FOUND");
  if (HaveAdworker()) {
    // A command's event names the token that made it (gRPC: ADCTLD_TOKEN; HTTP: ci).
    const std::string id = c.Submit(c.WriteSpec("who", kLongSpec));
    EXPECT_EQ(c.HttpWithAuthorization("POST", "/api/v1/jobs/" + id + "/cancel",
                                      "Bearer s3cret-submit", "{}")
                  .status,
              200);
    const std::string events = c.Http("GET", "/api/v1/jobs/" + id + "/events").body;
    EXPECT_NE(events.find("submitted by ADCTLD_TOKEN"), std::string::npos) << events;
    EXPECT_NE(events.find(" by ci"), std::string::npos) << events;
  }

  const HttpReply metrics = c.HttpWithAuthorization("GET", "/metrics", "");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("adctl_jobs"), std::string::npos);
  EXPECT_EQ(c.HttpWithAuthorization("GET", "/healthz", "").status, 200);
  // The page's files too (adctld's default --static-dir), when the web target built them.
  if (fs::exists(std::string(ADCTL_TEST_STATIC_DIR) + "/index.html")) {
    const HttpReply page = c.HttpWithAuthorization("GET", "/", "");
    EXPECT_EQ(page.status, 200);
    EXPECT_NE(page.body.find("<title>adctl</title>"), std::string::npos) << page.body;
  }
}

TEST(HttpApiTest, ErrorsAreJsonWithTheirStatus) {
  Coordinator c(1);
  c.Start();
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope"), 404, "NOT_FOUND");
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/metrics?max_points=10"), 404, "NOT_FOUND");
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/updates?timeout_ms=10"), 404, "NOT_FOUND");
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/logs?rank=0"), 404, "NOT_FOUND");
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/checkpoints"), 404, "NOT_FOUND");
  ExpectError(c.Http("POST", "/api/v1/jobs/j-nope/cancel"), 404, "NOT_FOUND");
  ExpectError(c.Http("POST", "/api/v1/jobs/j-nope/resume"), 404, "NOT_FOUND");
  ExpectError(c.Http("GET", "/api/v1/no-such-route"), 404, "NOT_FOUND");
  // The jobs list pages as JobService.ListJobs does.
  ExpectError(c.Http("GET", "/api/v1/jobs?page_size=-1"), 400, "INVALID_ARGUMENT");
  EXPECT_EQ(c.Http("GET", "/api/v1/jobs?page_size=5000").status, 200);  // capped, as on gRPC
  ExpectError(c.Http("GET", "/api/v1/jobs?page_token=abc"), 400, "INVALID_ARGUMENT");
  ExpectError(c.Http("GET", "/api/v1/jobs?state=JOB_STATE_NOPE"), 400, "INVALID_ARGUMENT");
  EXPECT_EQ(c.Http("GET", "/api/v1/jobs?page_size=1&state=JOB_STATE_RUNNING").status, 200);
  // Bad parameters are 400 before the job is looked up.
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/metrics?max_points=abc"), 400, "INVALID_ARGUMENT");
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/metrics?max_points=0"), 400, "INVALID_ARGUMENT");
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/updates?timeout_ms=-1"), 400, "INVALID_ARGUMENT");
  ExpectError(c.Http("GET", "/api/v1/jobs/j-nope/updates?after_event=x"), 400, "INVALID_ARGUMENT");
  ExpectError(c.Http("POST", "/api/v1/jobs/j-nope/cancel", "not json"), 400, "INVALID_ARGUMENT");
  ExpectError(c.Http("POST", "/api/v1/jobs/j-nope/cancel", R"({"grace_seconds": -1})"), 400,
              "INVALID_ARGUMENT");
  // No token configured: the API takes adctld's owner token (HTTP is TCP: every account on the
  // machine reaches it), /healthz needs none.
  ExpectError(c.HttpWithAuthorization("GET", "/api/v1/jobs", ""), 401, "UNAUTHENTICATED");
  EXPECT_EQ(c.HttpWithAuthorization("GET", "/api/v1/jobs", "Bearer " + c.HttpToken()).status, 200);
  EXPECT_EQ(c.HttpWithAuthorization("GET", "/healthz", "").status, 200);
}

using HttpApiTrainingTest = CoordinatorTest<1>;

TEST_F(HttpApiTrainingTest, MetricsLongPollLogsCheckpointsAndCommands) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(c.WriteSpec("long", kLongSpec));
  const std::string job = "/api/v1/jobs/" + id;
  c.WaitUntil(
      id, [](const nlohmann::json& j) { return Step(j) >= 5; }, 240, "step 5");

  // Metric history: all points, then downsampled to 3 and to 1 per rank.
  const HttpReply all = c.Http("GET", job + "/metrics");
  ASSERT_EQ(all.status, 200) << all.body;
  const auto& points = all.json["points"];
  ASSERT_GE(points.size(), 5u);
  const HttpReply three = c.Http("GET", job + "/metrics?max_points=3");
  ASSERT_EQ(three.status, 200) << three.body;
  ASSERT_EQ(three.json["points"].size(), 3u) << three.body;
  EXPECT_EQ(AsInt(three.json["points"][0]["step"]), AsInt(points[0]["step"]));
  EXPECT_GE(AsInt(three.json["points"][2]["step"]), AsInt(points.back()["step"]));
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_LT(AsInt(three.json["points"][i - 1]["step"]), AsInt(three.json["points"][i]["step"]));
  }
  for (const char* field : {"loss", "clips_per_second", "mfu_ratio", "gpu_utilization", "rank"}) {
    EXPECT_TRUE(three.json["points"][0].contains(field)) << field;
  }
  const HttpReply one = c.Http("GET", job + "/metrics?max_points=1");
  ASSERT_EQ(one.json["points"].size(), 1u) << one.body;
  EXPECT_GE(AsInt(one.json["last_id"]), AsInt(all.json["last_id"]));

  // Long poll: answers as soon as something is new (a step takes well under the timeout), and
  // the cursor it returns continues from there.
  const HttpReply events = c.Http("GET", job + "/events");
  int64_t last_event = AsInt(events.json["events"].back()["id"]);
  const HttpReply latest = c.Http("GET", job + "/metrics?max_points=1");
  const int64_t first_metric = AsInt(latest.json["last_id"]);
  int64_t last_metric = first_metric;
  size_t new_points = 0;
  auto start = Clock::now();
  for (int poll = 0; poll < 5 && new_points == 0; ++poll) {
    const auto asked = Clock::now();
    const HttpReply update =
        c.Http("GET", job + "/updates?after_event=" + std::to_string(last_event) +
                          "&after_metric=" + std::to_string(last_metric) + "&timeout_ms=30000");
    ASSERT_EQ(update.status, 200) << update.body;
    EXPECT_LT(SecondsSince(asked), 25.0);
    EXPECT_FALSE(update.json["points"].empty() && update.json["events"].empty()) << update.body;
    EXPECT_EQ(update.json["job"]["state"], "JOB_STATE_RUNNING");
    new_points += update.json["points"].size();
    last_event = AsInt(update.json["last_event"]);
    last_metric = AsInt(update.json["last_metric"]);
  }
  EXPECT_GT(new_points, 0u);
  EXPECT_GT(last_metric, first_metric);

  // Logs: read from 0, then follow from next_offset; together they are the file's prefix.
  const HttpReply first = c.Http("GET", job + "/logs?rank=0&offset=0&max_bytes=100");
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_TRUE(first.json["exists"].get<bool>());
  const std::string head = first.json["data"];
  EXPECT_EQ(head.size(), 100u);
  EXPECT_EQ(first.json["next_offset"], 100);
  const HttpReply rest = c.Http("GET", job + "/logs?rank=0&offset=100");
  ASSERT_EQ(rest.status, 200) << rest.body;
  EXPECT_EQ(rest.json["offset"], 100);
  const std::string tail = rest.json["data"];
  const std::string file =
      ReadFile(c.Describe(id)["job_dir"].get<std::string>() + "/logs/attempt-1/rank-0.log");
  EXPECT_EQ(file.substr(0, head.size() + tail.size()), head + tail);
  ExpectError(c.Http("GET", job + "/logs?rank=7"), 400, "INVALID_ARGUMENT");
  ExpectError(c.Http("GET", job + "/logs?rank=0&offset=-5"), 400, "INVALID_ARGUMENT");

  // Checkpoints: the committed ones, on disk.
  const HttpReply checkpoints = c.Http("GET", job + "/checkpoints");
  ASSERT_EQ(checkpoints.status, 200) << checkpoints.body;
  ASSERT_FALSE(checkpoints.json["checkpoints"].empty()) << checkpoints.body;
  EXPECT_TRUE(checkpoints.json["checkpoints"].back()["on_disk"].get<bool>());

  // Commands: pause, a second pause is a conflict, resume, cancel, then nothing more.
  const HttpReply paused = c.Http("POST", job + "/pause", R"({"grace_seconds": 20})");
  ASSERT_EQ(paused.status, 200) << paused.body;
  c.WaitState(id, "PAUSED", 60);
  ExpectError(c.Http("POST", job + "/pause"), 409, "FAILED_PRECONDITION");
  const HttpReply resumed = c.Http("POST", job + "/resume");
  ASSERT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_NE(resumed.json["state"], "JOB_STATE_PAUSED") << resumed.body;
  c.WaitState(id, "RUNNING", 120);
  const HttpReply cancelled = c.Http("POST", job + "/cancel");
  ASSERT_EQ(cancelled.status, 200) << cancelled.body;
  c.WaitState(id, "CANCELLED", 60);
  EXPECT_EQ(c.Describe(id)["state"], "JOB_STATE_CANCELLED");
  ExpectError(c.Http("POST", job + "/cancel"), 409, "FAILED_PRECONDITION");
  ExpectError(c.Http("POST", job + "/resume"), 409, "FAILED_PRECONDITION");

  // Long poll on a job where nothing happens any more: answers at the timeout, empty.
  const HttpReply end = c.Http("GET", job + "/metrics?max_points=1");
  const HttpReply all_events = c.Http("GET", job + "/events");
  start = Clock::now();
  const HttpReply quiet = c.Http(
      "GET", job + "/updates?after_event=" +
                 std::to_string(AsInt(all_events.json["events"].back()["id"])) +
                 "&after_metric=" + std::to_string(AsInt(end.json["last_id"])) + "&timeout_ms=800");
  ASSERT_EQ(quiet.status, 200) << quiet.body;
  EXPECT_GE(SecondsSince(start), 0.7);
  EXPECT_LT(SecondsSince(start), 10.0);
  EXPECT_TRUE(quiet.json["points"].empty()) << quiet.body;
  EXPECT_TRUE(quiet.json["events"].empty()) << quiet.body;
  EXPECT_EQ(quiet.json["job"]["state"], "JOB_STATE_CANCELLED");
}

}  // namespace
}  // namespace adctl::testing
