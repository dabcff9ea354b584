// Issue 31's dry run and webhooks through the real binaries: `adctl submit --dry-run` against a
// real adctld prints the plan and creates nothing; a real training job submitted with
// `--webhook` ends, and adctld's `--webhook` receiver and the job's own each get one signed
// job.ended POST.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "server/notify/webhooks.h"
#include "tests/integration/harness.h"
#include "tests/server/webhook_receiver.h"

namespace adctl::testing {
namespace {

TEST(NotifyDryRunTest, ADryRunCreatesNothingAndAJobsEndIsToldSigned) {
  if (!HaveAdworker()) GTEST_SKIP() << "adworker is not built";
  Receiver adctld_wide, job_own;
  Coordinator c(2);
  const std::string secret = c.dir() + "/webhook.secret";
  std::ofstream(secret) << "team-secret\n";
  c.SetExtraArgs({"--webhook", adctld_wide.url(), "--webhook-secret-file", secret});
  c.Start();
  const std::string spec = c.WriteSpec("t.yaml", TinyJobSpec("t", 2, "gpus: 1"));

  CommandResult dry = c.Adctl({"submit", spec, "--dry-run", "--webhook", job_own.url()});
  ASSERT_EQ(dry.exit_code, 0) << dry.out << dry.err;
  EXPECT_NE(dry.out.find("dry run: the spec is valid; nothing was submitted"), std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("Would start:   now, on cpu0"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("GPU memory:    ~"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("Webhook:       http://127.0.0.1:"), std::string::npos) << dry.out;
  nlohmann::json plan = c.AdctlJson({"submit", spec, "--dry-run", "--gpus", "2"});
  EXPECT_EQ(plan["ranks"], 2);
  EXPECT_EQ(plan["devices"], nlohmann::json::array({"cpu0", "cpu1"}));
  EXPECT_GT(std::stoll(plan["memory"]["peak_bytes"].get<std::string>()), 0);
  // A bad spec fails the same way a submit does.
  CommandResult bad = c.Adctl({"submit", spec, "--dry-run", "--set", "train.lr=-1"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("train.lr"), std::string::npos) << bad.err;
  EXPECT_EQ(c.AdctlJson({"ls"})["jobs"].size(), 0u) << "a dry run created a job";

  CommandResult run = c.Adctl({"submit", spec, "--webhook", job_own.url("/own"), "--wait"});
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  for (Receiver* r : {&adctld_wide, &job_own}) {
    auto seen = r->WaitFor(1);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].get_header_value("X-Adctl-Signature"),
              WebhookSignature("team-secret", seen[0].body));
    auto body = nlohmann::json::parse(seen[0].body);
    EXPECT_EQ(body["event"], "job.ended");
    EXPECT_EQ(body["state"], "SUCCEEDED");
    EXPECT_EQ(body["step"], 2);
  }
  EXPECT_EQ(job_own.WaitFor(1)[0].path, "/own");
}

}  // namespace
}  // namespace adctl::testing
