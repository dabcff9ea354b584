// Issue 31's notifications and dry run, against real HTTP receivers and a real supervisor
// (fake_worker.sh ranks): webhooks signed with HMAC-SHA256, retried with backoff and given up
// after a bound, never blocking; a job's own webhooks beside adctld's, left out of the rank's
// spec; and a dry run that checks like a submit, says where the job would start or why it would
// wait, and creates nothing.
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/job_layout.h"
#include "server/notify/webhooks.h"
#include "tests/server/supervisor_fixture.h"
#include "tests/server/webhook_receiver.h"
#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

TEST(WebhookSignatureTest, IsHmacSha256OfTheBody) {
  // RFC 4231, test case 2.
  EXPECT_EQ(WebhookSignature("Jefe", "what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(WebhookSignatureTest, EventsShowNoPathOfAUrl) {
  EXPECT_EQ(RedactWebhookUrl("https://hooks.slack.com/services/T0/B0/secret"),
            "https://hooks.slack.com/…");
  EXPECT_EQ(RedactWebhookUrl("http://127.0.0.1:8080"), "http://127.0.0.1:8080/");
}

struct Reported {
  std::mutex mu;
  std::vector<std::string> messages;
  void Add(const std::string& level, const std::string& message) {
    std::lock_guard<std::mutex> lock(mu);
    messages.push_back(level + ": " + message);
  }
};

WebhookNotifier::Report Into(Reported* r) {
  return [r](const std::string&, const std::string& level, const std::string& message) {
    r->Add(level, message);
  };
}

TEST(WebhookNotifierTest, ASignedPostReachesEveryUrlOnce) {
  Receiver adctld_wide, job_own;
  WebhookOptions o;
  o.urls = {adctld_wide.url()};
  o.secret = "s3cret";
  WebhookNotifier notifier(o, nullptr);
  notifier.Start();
  // The job names adctld's URL again: it is told once.
  notifier.Post("j-1", {job_own.url("/job"), adctld_wide.url()},
                {{"event", "job.ended"}, {"state", "SUCCEEDED"}});
  for (Receiver* r : {&adctld_wide, &job_own}) {
    auto seen = r->WaitFor(1);
    ASSERT_EQ(seen.size(), 1u);
    const httplib::Request& req = seen[0];
    EXPECT_EQ(req.get_header_value("X-Adctl-Signature"), WebhookSignature("s3cret", req.body));
    EXPECT_EQ(req.get_header_value("X-Adctl-Event"), "job.ended");
    EXPECT_EQ(req.get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(nlohmann::json::parse(req.body)["state"], "SUCCEEDED");
  }
  EXPECT_EQ(job_own.WaitFor(1)[0].path, "/job");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(adctld_wide.WaitFor(1).size(), 1u);
}

TEST(WebhookNotifierTest, AFailingReceiverGetsTheSameDeliveryAgainUntilItAccepts) {
  Receiver flaky(/*failures=*/2);
  Reported reported;
  WebhookOptions o;
  o.urls = {flaky.url()};
  o.backoff_seconds = 0.05;
  WebhookNotifier notifier(o, Into(&reported));
  notifier.Start();
  notifier.Post("j-1", {}, {{"event", "job.ended"}});
  auto seen = flaky.WaitFor(3);
  ASSERT_EQ(seen.size(), 3u);
  // One delivery: the same id and body each time, unsigned without a secret.
  for (const auto& req : seen) {
    EXPECT_EQ(req.get_header_value("X-Adctl-Delivery"),
              seen[0].get_header_value("X-Adctl-Delivery"));
    EXPECT_EQ(req.body, seen[0].body);
    EXPECT_FALSE(req.has_header("X-Adctl-Signature"));
  }
  for (int i = 0; i < 200 && notifier.pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(notifier.pending(), 0u);
  std::lock_guard<std::mutex> lock(reported.mu);
  ASSERT_EQ(reported.messages.size(), 1u);
  EXPECT_NE(reported.messages[0].find("info: webhook http://127.0.0.1:"), std::string::npos);
  EXPECT_NE(reported.messages[0].find("delivered at attempt 3 (earlier: HTTP 500)"),
            std::string::npos)
      << reported.messages[0];
}

TEST(WebhookNotifierTest, RetriesAreBoundedAndTheGiveUpIsReported) {
  Receiver dead(/*failures=*/100);
  Reported reported;
  WebhookOptions o;
  o.urls = {dead.url(), "http://127.0.0.1:1/closed-port"};
  o.max_attempts = 3;
  o.backoff_seconds = 0.02;
  WebhookNotifier notifier(o, Into(&reported));
  notifier.Start();
  notifier.Post("j-1", {}, {{"event", "job.samples"}});
  for (int i = 0; i < 500 && notifier.pending() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(notifier.pending(), 0u);
  EXPECT_EQ(dead.WaitFor(3).size(), 3u);  // three attempts, no fourth
  std::lock_guard<std::mutex> lock(reported.mu);
  ASSERT_EQ(reported.messages.size(), 2u);
  std::string all = reported.messages[0] + "\n" + reported.messages[1];
  EXPECT_NE(all.find("job.samples not delivered after 3 attempts: HTTP 500"), std::string::npos)
      << all;
  EXPECT_NE(all.find("http://127.0.0.1:1/…: job.samples not delivered after 3 attempts: no "
                     "response"),
            std::string::npos)
      << all;
}

TEST(WebhookNotifierTest, PostReturnsWhileAReceiverHangs) {
  Receiver stuck(/*failures=*/0, /*hold=*/true);
  WebhookOptions o;
  o.urls = {stuck.url()};
  WebhookNotifier notifier(o, nullptr);
  notifier.Start();
  notifier.Post("j-1", {}, {{"event", "job.ended"}});
  ASSERT_EQ(stuck.WaitFor(1).size(), 1u);              // the receiver holds the first delivery ...
  notifier.Post("j-2", {}, {{"event", "job.ended"}});  // ... and Post still returns
  EXPECT_EQ(notifier.pending(), 2u);
  stuck.Release();
  EXPECT_EQ(stuck.WaitFor(2).size(), 2u);
}

TEST(WebhookOptionsTest, FlagsAreCheckedAndTheSecretIsTrimmed) {
  const TempDir tmp;
  const std::string dir = tmp.path();
  std::ofstream(dir + "/secret") << "  s3cret\n";
  auto o = LoadWebhookOptions({"https://example.com/h"}, dir + "/secret", 4, 1.5);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->secret, "s3cret");
  EXPECT_EQ(o->max_attempts, 4);
  auto bad = LoadWebhookOptions({"ftp://example.com"}, "", 5, 2);
  EXPECT_NE(bad.status().message().find("--webhook: an http:// or https:// URL"), std::string::npos)
      << bad.status().ToString();
  std::ofstream(dir + "/empty") << "\n";
  auto empty = LoadWebhookOptions({}, dir + "/empty", 5, 2);
  EXPECT_NE(empty.status().message().find("is empty"), std::string::npos);
  auto missing = LoadWebhookOptions({}, dir + "/none", 5, 2);
  EXPECT_NE(missing.status().message().find("cannot be read"), std::string::npos);
}

// The supervisor with adctld-wide webhooks and a secret.
class QueueNotifyTest : public SupervisorTest {
 protected:
  void Customize(SupervisorOptions* o) override {
    o->webhooks.urls = {adctld_wide_.url()};
    o->webhooks.secret = "team-secret";
    o->webhooks.backoff_seconds = 0.05;
  }
  Receiver adctld_wide_;
};

TEST_F(QueueNotifyTest, JobsEndAndSamplesAreToldToAdctldsAndTheJobsWebhooks) {
  Receiver job_own;
  SubmitRequest r;
  r.spec_yaml = Spec("ok", 1) + "notify: {webhooks: [\"" + job_own.url("/spec") + "\"]}\n";
  r.webhooks = {job_own.url("/flag")};
  r.labels = {{"team", "motion"}};
  auto submitted = supervisor_->jobs().Submit(r);
  ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
  const std::string id = submitted->first.id;
  const JobRecord job = WaitFor(id, JobState::kSucceeded);
  // The rank's copy of the spec names no webhook (a URL may carry a token).
  std::ifstream rank_spec(JobLayout(job.job_dir).spec());
  std::stringstream text;
  text << rank_spec.rdbuf();
  EXPECT_NE(text.str().find("name: \"ok\""), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("webhooks"), std::string::npos) << text.str();

  auto wide = adctld_wide_.WaitFor(1);
  ASSERT_EQ(wide.size(), 1u);
  EXPECT_EQ(wide[0].get_header_value("X-Adctl-Signature"),
            WebhookSignature("team-secret", wide[0].body));
  auto body = nlohmann::json::parse(wide[0].body);
  EXPECT_EQ(body["event"], "job.ended");
  EXPECT_EQ(body["job_id"], id);
  EXPECT_EQ(body["state"], "SUCCEEDED");
  EXPECT_EQ(body["labels"]["team"], "motion");
  EXPECT_EQ(body["text"].get<std::string>().rfind("adctl: job " + id + " (ok) SUCCEEDED", 0), 0u)
      << body["text"];
  auto own = job_own.WaitFor(2);
  ASSERT_EQ(own.size(), 2u);  // the spec's URL and the request's
  std::set<std::string> paths = {own[0].path, own[1].path};
  EXPECT_EQ(paths, (std::set<std::string>{"/spec", "/flag"}));

  // Samples a rank reports reach the same receivers.
  std::filesystem::create_directories(job.job_dir + "/samples");
  std::ofstream(job.job_dir + "/samples/step-4-0.mp4") << "x";
  SampleRecord sample;
  sample.step = 4;
  sample.prompt = "a zoom";
  sample.mp4 = "samples/step-4-0.mp4";
  sample.gif = "samples/step-4-0.mp4";
  ASSERT_TRUE(supervisor_->workers().ReportSamples(id, 1, 0, {sample}, "1 sample at step 4").ok());
  wide = adctld_wide_.WaitFor(2);
  ASSERT_EQ(wide.size(), 2u);
  body = nlohmann::json::parse(wide[1].body);
  EXPECT_EQ(body["event"], "job.samples");
  EXPECT_EQ(body["sample_step"], 4);
  EXPECT_EQ(body["samples"][0]["prompt"], "a zoom");
}

TEST_F(QueueNotifyTest, AMalformedWebhookIsRefusedAtSubmit) {
  SubmitRequest r;
  r.spec_yaml = Spec("ok", 1);
  r.webhooks = {"hooks.example.com/x"};
  auto submitted = supervisor_->jobs().Submit(r);
  EXPECT_EQ(submitted.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(submitted.status().message().find("notify.webhooks[0]: an http:// or https:// URL"),
            std::string::npos)
      << submitted.status().ToString();
}

TEST_F(QueueNotifyTest, ADryRunSaysWhereTheJobWouldStartOrWhyItWouldWaitAndCreatesNothing) {
  SubmitRequest r;
  r.spec_yaml = Spec("ok", 2);
  auto plan = supervisor_->jobs().Plan(r);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->devices, (std::vector<std::string>{"cpu0", "cpu1"}));
  EXPECT_EQ(plan->wait_reason, "");
  EXPECT_EQ(plan->ranks, 2);
  EXPECT_EQ(plan->launcher, LauncherKind::kLocal);
  EXPECT_EQ(plan->global_batch, 2);
  ASSERT_TRUE(plan->memory.has_value());
  EXPECT_GT(plan->memory->peak_bytes(), 0);
  EXPECT_EQ(plan->webhooks, (std::vector<std::string>{adctld_wide_.url()}));
  EXPECT_TRUE(store_->ListJobs({}, 10).value().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/jobs")) << "a dry run made a job folder";

  // A job holds both slots: the plan waits, saying for whom.
  const std::string running = Submit(Spec("sleep", 2));
  WaitFor(running, JobState::kStarting);
  plan = supervisor_->jobs().Plan(r);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->devices.empty());
  EXPECT_EQ(plan->wait_reason, "waiting for 2 CPU slots: 0 free, in use by " + running);
  // Behind a dependency.
  r.spec_yaml = Spec("ok", 1);
  r.after = {running};
  plan = supervisor_->jobs().Plan(r);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->wait_reason.rfind("after " + running + " (", 0), 0u) << plan->wait_reason;
  EXPECT_EQ(store_->ListJobs({}, 10).value().size(), 1u);

  // The checks are a submit's: a bad spec, too many ranks, an unknown dependency.
  r.after = {"j-nope"};
  EXPECT_NE(supervisor_->jobs().Plan(r).status().message().find("after: no job j-nope"),
            std::string::npos);
  r.after.clear();
  r.spec_yaml = Spec("ok", 3);
  EXPECT_EQ(supervisor_->jobs().Plan(r).status().code(), StatusCode::kInvalidArgument);
  r.overrides = {"train.lr=-1"};
  EXPECT_EQ(supervisor_->jobs().Plan(r).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(supervisor_->jobs().Cancel(running, 0.0, true).ok());
}

}  // namespace
// Preemption (issue 31 item 4) across an adctld restart: a preemptible job whose ranks take
// their grace period to stop is PAUSING for a higher-priority job when the supervisor stops;
// the next one re-attaches it, and once its ranks are gone it still goes back to the queue by
// itself (the store kept who preempted it), behind the job it made room for. A dry run shows the
// preemption it would cause.
TEST_F(QueueNotifyTest, APreemptedJobGoesBackToTheQueueAcrossARestart) {
  const std::string low = Submit(
      "name: stubborn\nmodel: {preset: tiny}\ndata: {kind: synthetic}\ntrain: {max_steps: 4}\n"
      "resources: {gpus: 2, grace_seconds: 1, preemptible: true}\n");
  WaitFor(low, JobState::kStarting);
  SubmitRequest plan_request;
  plan_request.spec_yaml = Spec("sleep", 1);
  plan_request.priority = 10;
  auto plan = supervisor_->jobs().Plan(plan_request);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_NE(plan->wait_reason.find("preempting " + low + " (priority 0)"), std::string::npos)
      << plan->wait_reason;
  EXPECT_EQ(store_->GetJob(low)->state, JobState::kStarting) << "a dry run preempted";

  SubmitRequest high_request = plan_request;
  auto high = supervisor_->jobs().Submit(high_request);
  ASSERT_TRUE(high.ok()) << high.status().ToString();
  const std::string high_id = high->first.id;
  JobRecord pausing = WaitFor(low, JobState::kPausing);
  EXPECT_EQ(pausing.preempted_by, high_id);
  EXPECT_NE(pausing.message.find("preempted by " + high_id + " (priority 10 over 0"),
            std::string::npos)
      << pausing.message;

  supervisor_->Stop();
  supervisor_.reset();
  StartSupervisor(2);
  // The stubborn ranks are killed after their grace; the job is queued again, not left PAUSED.
  WaitFor(high_id, JobState::kStarting, 15);
  JobRecord back = WaitFor(low, JobState::kQueued, 15);
  EXPECT_EQ(back.preempted_by, high_id);
  EXPECT_EQ(back.message.rfind("back in the queue after preemption by " + high_id, 0), 0u)
      << back.message;
  const std::string expected = "waiting for 2 CPU slots: 1 free, in use by " + high_id;
  std::string reason;
  for (int i = 0; i < 250 && reason != expected; ++i) {  // the next schedule sets it
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    reason = supervisor_->jobs().WaitReason(low);
  }
  EXPECT_EQ(reason, expected);
  for (const std::string& id : {low, high_id}) {
    ASSERT_TRUE(supervisor_->jobs().Cancel(id, 0.0, true).ok());
  }
}

}  // namespace adctl
