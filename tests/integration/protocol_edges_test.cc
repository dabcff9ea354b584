// The protocol edges of issue 35 item 9 (and the counters of item 8, the compression of the
// compare view's JSON), end to end: a real adctld, the real adctl, raw gRPC and HTTP clients
// built from the proto and cpp-httplib as an integrator's would be.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "adctl/v1/job_service.grpc.pb.h"
#include "adctl/v1/worker_service.grpc.pb.h"
#include "common/sha256.h"
#include "tests/integration/harness.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;

bool HaveAdworker() { return !AdworkerPath().empty() && fs::exists(AdworkerPath()); }

// Runs until cancelled: tiny steps, no checkpoints.
std::string LongSpec(const std::string& name) {
  return "name: " + name +
         "\n"
         "model: {preset: tiny}\n"
         "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
         "train: {max_steps: 100000, batch_size: 1}\n"
         "checkpoint: {enabled: false}\n"
         "resources: {gpus: 1, grace_seconds: 5}\n";
}

std::shared_ptr<grpc::Channel> Channel(const Coordinator& c) {
  return grpc::CreateChannel(c.grpc_address(), grpc::InsecureChannelCredentials());
}

// JobService.ListJobs with exactly this `authorization` metadata ("" none).
grpc::Status ListJobs(const Coordinator& c, const std::string& authorization, int page_size = 0) {
  auto stub = v1::JobService::NewStub(Channel(c));
  grpc::ClientContext ctx;
  if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
  v1::ListJobsRequest req;
  req.set_page_size(page_size);
  v1::ListJobsResponse resp;
  return stub->ListJobs(&ctx, req, &resp);
}

// One rule for the Authorization scheme on gRPC and HTTP: `Bearer` in any case, or the bare
// token; another scheme is UNAUTHENTICATED saying so (not "unknown token"). Missing or invalid
// tokens are UNAUTHENTICATED on every service, WorkerService too; a role too low is
// PERMISSION_DENIED.
TEST(ProtocolEdgesTest, TokensFollowOneRuleOnGrpcAndHttp) {
  Coordinator c(1, "s3cret-admin");
  const std::string tokens = c.dir() + "/tokens.yaml";
  std::ofstream(tokens) << "tokens:\n  - {name: grafana, role: viewer, sha256: "
                        << Sha256Hex(std::string("s3cret-viewer")) << "}\n";
  c.SetExtraArgs({"--tokens-file", tokens});
  c.Start();
  for (const char* authorization :
       {"Bearer s3cret-admin", "bearer s3cret-admin", "BEARER s3cret-admin", "s3cret-admin"}) {
    EXPECT_EQ(c.HttpWithAuthorization("GET", "/api/v1/jobs", authorization).status, 200)
        << authorization;
    const grpc::Status st = ListJobs(c, authorization);
    EXPECT_TRUE(st.ok()) << authorization << ": " << st.error_message();
  }
  // Another scheme: the message says what is wrong with the header.
  const HttpReply basic = c.HttpWithAuthorization("GET", "/api/v1/jobs", "Basic czNjcmV0");
  EXPECT_EQ(basic.status, 401) << basic.body;
  EXPECT_NE(basic.json.value("message", "").find("scheme 'Basic'"), std::string::npos)
      << basic.body;
  const grpc::Status grpc_basic = ListJobs(c, "Basic czNjcmV0");
  EXPECT_EQ(grpc_basic.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(grpc_basic.error_message().find("scheme 'Basic'"), std::string::npos)
      << grpc_basic.error_message();
  EXPECT_EQ(ListJobs(c, "Bearer").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(c.HttpWithAuthorization("GET", "/api/v1/jobs", "Bearer").status, 401);
  // Unknown and missing tokens.
  for (const char* authorization : {"Bearer nope-nope", "bearer nope-nope", ""}) {
    EXPECT_EQ(ListJobs(c, authorization).error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << authorization;
    EXPECT_EQ(c.HttpWithAuthorization("GET", "/api/v1/jobs", authorization).status, 401)
        << authorization;
  }
  // A viewer's command: PERMISSION_DENIED (403), and adctl exits 2 for both kinds of refusal
  // (README's exit codes).
  auto stub = v1::JobService::NewStub(Channel(c));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "bearer s3cret-viewer");
  v1::CancelJobRequest cancel;
  cancel.set_job_id("j-none");
  v1::Job job;
  EXPECT_EQ(stub->CancelJob(&ctx, cancel, &job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  c.SetClientEnv({"ADCTL_TOKEN=nope-nope"});
  const CommandResult unknown = c.Adctl({"ls"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("unknown token"), std::string::npos) << unknown.err;
  c.SetClientEnv({"ADCTL_TOKEN=s3cret-viewer"});
  const CommandResult denied = c.Adctl({"cancel", "j-none"});
  EXPECT_EQ(denied.exit_code, 2) << denied.err;
  EXPECT_NE(denied.err.find("this needs submitter"), std::string::npos) << denied.err;
  c.SetClientEnv({});

  if (!HaveAdworker()) GTEST_SKIP() << "WorkerService needs a running attempt: adworker";
  const std::string id = c.Submit(c.WriteSpec("rank", LongSpec("rank")));
  c.WaitUntil(
      id, [](const nlohmann::json& j) { return j.value("attempt", 0) >= 1; }, 60, "attempt 1");
  auto worker = v1::WorkerService::NewStub(Channel(c));
  for (const std::string& authorization :
       {std::string(), std::string("Bearer not-the-rank"), std::string("Basic czNjcmV0")}) {
    grpc::ClientContext wctx;
    if (!authorization.empty()) wctx.AddMetadata("authorization", authorization);
    v1::HeartbeatRequest beat;
    beat.mutable_ref()->set_job_id(id);
    beat.mutable_ref()->set_attempt(1);
    beat.mutable_ref()->set_rank(0);
    v1::HeartbeatResponse resp;
    const grpc::Status st = worker->Heartbeat(&wctx, beat, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << "'" << authorization << "': " << st.error_message();
  }
  c.Adctl({"cancel", id, "--force"});
}

// The HTTP jobs list keeps every ?state=, refuses unknown parameters naming them, and caps
// page_size as gRPC does; tail_bytes < 0 is refused on both sides; a wrong method is 405 with
// Allow; "submitted" events carry their states; the JSON goes out gzip, not brotli.
TEST(ProtocolEdgesTest, QueryParametersMethodsEventsAndEncoding) {
  if (!HaveAdworker()) GTEST_SKIP() << "needs adworker";
  Coordinator c(1);
  c.Start();
  const std::string running = c.Submit(c.WriteSpec("a", LongSpec("a")));
  const std::string queued = c.Submit(c.WriteSpec("b", LongSpec("b")));
  const std::string cancelled = c.Submit(c.WriteSpec("c", LongSpec("c")));
  ASSERT_EQ(c.Adctl({"cancel", cancelled}).exit_code, 0);
  c.WaitState(cancelled, "CANCELLED", 30);
  c.WaitState(running, "RUNNING", 120);

  const HttpReply both = c.Http("GET", "/api/v1/jobs?state=JOB_STATE_QUEUED&state=CANCELLED");
  ASSERT_EQ(both.status, 200) << both.body;
  std::set<std::string> ids;
  for (const auto& j : both.json["jobs"]) ids.insert(j["id"].get<std::string>());
  EXPECT_EQ(ids, (std::set<std::string>{queued, cancelled})) << both.body;
  const HttpReply typo = c.Http("GET", "/api/v1/jobs?stat=RUNNING");
  EXPECT_EQ(typo.status, 400) << typo.body;
  EXPECT_NE(typo.json.value("message", "").find("stat: unknown parameter"), std::string::npos)
      << typo.body;
  EXPECT_EQ(c.Http("GET", "/api/v1/jobs/" + running + "/metrics?max_point=3").status, 400);
  EXPECT_EQ(c.Http("GET", "/api/v1/jobs/" + running + "/metrics?max_points=3").status, 200);
  // page_size over 1000: capped on both sides (the first page holds every job here).
  const HttpReply big_page = c.Http("GET", "/api/v1/jobs?page_size=5000");
  ASSERT_EQ(big_page.status, 200) << big_page.body;
  EXPECT_EQ(big_page.json["jobs"].size(), 3u);
  EXPECT_TRUE(ListJobs(c, "", 5000).ok());

  // tail_bytes: negative is refused naming it; N gives the log's last N bytes.
  const std::string logs = "/api/v1/jobs/" + running + "/logs?rank=0";
  const HttpReply negative = c.Http("GET", logs + "&tail_bytes=-1");
  EXPECT_EQ(negative.status, 400) << negative.body;
  EXPECT_NE(negative.json.value("message", "").find("tail_bytes"), std::string::npos)
      << negative.body;
  const HttpReply tail = c.Http("GET", logs + "&tail_bytes=10");
  ASSERT_EQ(tail.status, 200) << tail.body;
  EXPECT_EQ(tail.json["data"].get<std::string>().size(), 10u) << tail.body;
  EXPECT_EQ(tail.json["offset"].get<int64_t>(), tail.json["size"].get<int64_t>() - 10);
  {
    auto stub = v1::JobService::NewStub(Channel(c));
    grpc::ClientContext ctx;
    v1::StreamLogsRequest req;
    req.set_job_id(running);
    req.set_tail_bytes(-1);
    auto reader = stub->StreamLogs(&ctx, req);
    v1::LogChunk chunk;
    while (reader->Read(&chunk)) {
    }
    const grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("tail_bytes"), std::string::npos) << st.error_message();
  }

  // A route's other methods: 405 naming the ones it takes.
  httplib::Client http("http://" + c.http_address());
  const httplib::Headers auth = {{"Authorization", "Bearer " + c.HttpToken()}};
  auto post_list = http.Post("/api/v1/jobs", auth, "{}", "application/json");
  ASSERT_TRUE(post_list);
  EXPECT_EQ(post_list->status, 405) << post_list->body;
  EXPECT_EQ(post_list->get_header_value("Allow"), "GET, HEAD");
  auto get_cancel = http.Get(("/api/v1/jobs/" + running + "/cancel").c_str(), auth);
  ASSERT_TRUE(get_cancel);
  EXPECT_EQ(get_cancel->status, 405) << get_cancel->body;
  EXPECT_EQ(get_cancel->get_header_value("Allow"), "POST");
  auto delete_job = http.Delete(("/api/v1/jobs/" + running).c_str(), auth);
  ASSERT_TRUE(delete_job);
  EXPECT_EQ(delete_job->status, 405);
  auto post_metrics = http.Post("/metrics", "", "text/plain");
  ASSERT_TRUE(post_metrics);
  EXPECT_EQ(post_metrics->status, 405);
  EXPECT_EQ(post_metrics->get_header_value("Allow"), "GET, HEAD");
  EXPECT_EQ(http.Get("/api/v1/no-such-route", auth)->status, 404);

  // A browser's Accept-Encoding: gzip, not brotli (brotli at quality 11 cost 0.47 s a 442 KB
  // metrics answer: bench/results/compare_view_cpu_20261205b.md).
  httplib::Headers browser = auth;
  browser.emplace("Accept-Encoding", "gzip, deflate, br");
  auto metrics = http.Get(("/api/v1/jobs/" + running + "/metrics").c_str(), browser);
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Encoding"), "gzip");

  // "submitted" carries its states like every state change: from none to QUEUED, and each
  // transition starts where the one before it ended.
  const HttpReply events = c.Http("GET", "/api/v1/jobs/" + running + "/events");
  ASSERT_EQ(events.status, 200) << events.body;
  const auto& list = events.json["events"];
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list[0]["kind"], "submitted");
  EXPECT_EQ(list[0]["from_state"], "JOB_STATE_UNSPECIFIED");
  EXPECT_EQ(list[0]["to_state"], "JOB_STATE_QUEUED");
  std::string state = "JOB_STATE_QUEUED";
  for (const auto& e : list) {
    if (e["kind"] != "transition") continue;
    EXPECT_EQ(e["from_state"], state) << e.dump();
    state = e["to_state"];
  }
}

// adctl_job_restarts_total and the per-rank counters exist at 0 from the job's start (a job
// still queued has them), so rate() and increase() have a series before the first increment.
TEST(ProtocolEdgesTest, PerJobCountersExistAtZeroFromTheStart) {
  if (!HaveAdworker()) GTEST_SKIP() << "needs adworker";
  Coordinator c(1);
  c.Start();
  const std::string running = c.Submit(c.WriteSpec("a", LongSpec("a")));
  const std::string queued = c.Submit(c.WriteSpec("b", LongSpec("b")));
  const std::string metrics = c.HttpGet("/metrics");
  for (const std::string& id : {running, queued}) {
    EXPECT_NE(metrics.find("adctl_job_restarts_total{job_id=\"" + id + "\"} 0\n"),
              std::string::npos)
        << id << "\n"
        << metrics;
  }
  for (const char* counter :
       {"adctl_train_data_wait_seconds_total", "adctl_train_allreduce_exposed_seconds_total"}) {
    EXPECT_NE(metrics.find(std::string(counter) + "{job_id=\"" + queued + "\",rank=\"0\"} 0\n"),
              std::string::npos)
        << counter << "\n"
        << metrics;
  }
  EXPECT_NE(metrics.find("adctl_train_step_duration_seconds_count{job_id=\"" + queued + "\"} 0\n"),
            std::string::npos)
      << metrics;
}

// adctl ls says how many jobs it left out and pages through all of them with --all; -o json
// submit --wait --timeout prints the job as it stands; wait prints where the checkpoints really
// are (checkpoint.dir).
TEST(ProtocolEdgesTest, CliListsEverythingAndPrintsWhatItKnows) {
  if (!HaveAdworker()) GTEST_SKIP() << "needs adworker";
  Coordinator c(2);
  c.Start();
  const std::string spec = c.WriteSpec("long", LongSpec("long"));
  for (int i = 0; i < 3; ++i) c.Submit(spec);
  const CommandResult two = c.Adctl({"ls", "--limit", "2"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_NE(two.out.find("(2 of 3 jobs shown, 1 more: adctl ls --all, or --limit N)"),
            std::string::npos)
      << two.out;
  const auto json_two = c.AdctlJson({"ls", "--limit", "2"});
  EXPECT_EQ(json_two["jobs"].size(), 2u);
  EXPECT_FALSE(json_two["next_page_token"].get<std::string>().empty());
  const auto all = c.AdctlJson({"ls", "--all"});
  EXPECT_EQ(all["jobs"].size(), 3u);
  EXPECT_EQ(all["next_page_token"], "");

  // Queued behind the others, it cannot end within a second.
  const CommandResult timed_out =
      c.Adctl({"-o", "json", "submit", spec, "--wait", "--timeout", "1"});
  EXPECT_EQ(timed_out.exit_code, 4) << timed_out.err;
  const auto job = nlohmann::json::parse(timed_out.out, nullptr, false);
  ASSERT_TRUE(job.is_object()) << "stdout: '" << timed_out.out << "'";
  EXPECT_EQ(job.value("state", ""), "JOB_STATE_QUEUED") << timed_out.out;
  const auto listed = c.AdctlJson({"ls", "--all"});
  for (const auto& j : listed["jobs"]) {
    const std::string id = j["id"];
    c.Adctl({"cancel", id, "--force"});
    c.WaitState(id, "CANCELLED", 60);
  }

  const std::string folder = c.dir() + "/my-checkpoints";
  const std::string short_spec =
      c.WriteSpec("short",
                  "name: short\nmodel: {preset: tiny}\n"
                  "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
                  "train: {max_steps: 4, batch_size: 1}\n"
                  "checkpoint: {dir: " +
                      folder +
                      ", every_steps: 2, keep_last: 2}\n"
                      "resources: {gpus: 1}\n");
  const std::string id = c.Submit(short_spec);
  const CommandResult waited = c.Adctl({"wait", id, "--timeout", "240"});
  ASSERT_EQ(waited.exit_code, 0) << waited.out << waited.err;
  EXPECT_NE(waited.out.find("checkpoints: " + folder + " (last step 4)"), std::string::npos)
      << waited.out;
}

}  // namespace
}  // namespace adctl::testing
