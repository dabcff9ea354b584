// Checkpoints kept for picking (issue 30): retention's keep_every and keep_at_validation, and
// pins made with `adctl ckpt pin` while the job runs, end to end on CPU (real adctld, adctl,
// adworker).
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "tests/integration/harness.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;

class CheckpointKeepTest : public CoordinatorTest<1> {
 protected:
  // The steps of the job's checkpoints on disk, as `adctl ckpt ls` lists them.
  std::set<int64_t> OnDisk(const std::string& id, std::set<int64_t>* pinned = nullptr) {
    std::set<int64_t> out;
    auto listed = coordinator_->AdctlJson({"ckpt", "ls", id});
    for (const auto& c : listed.value("checkpoints", nlohmann::json::array())) {
      if (!c.value("on_disk", false)) continue;
      const int64_t step = std::stoll(c.value("step", std::string("0")));
      out.insert(step);
      if (pinned && c.value("pinned", false)) pinned->insert(step);
    }
    return out;
  }
};

// The example (2,000 steps, a checkpoint every 10, the newest 2 kept, every 500th kept,
// a sample at 50: {50, 500, 1000, 1500, 1990, 2000}) at a hundredth of its steps, as tiny CPU
// steps take a while: a checkpoint every step, the newest 2, every 5th, the sample at 3.
// The step behind the sample then exports.
TEST_F(CheckpointKeepTest, KeepEveryAndValidationStepsSurviveRetentionAndExport) {
  Coordinator& c = *coordinator_;
  const std::string sd = c.dir() + "/sd";
  ASSERT_EQ(std::system((AdworkerPath() + " make-tiny-pretrained --out " + sd + " > " + c.dir() +
                         "/make-sd.log 2>&1")
                            .c_str()),
            0);
  const std::string id = c.Submit(c.WriteSpec(
      "keep", "name: keep\nmodel: {pretrained: " + sd +
                  "}\n"
                  "data: {kind: synthetic, num_samples: 4, frames: 4, height: 8, width: 8}\n"
                  "train: {max_steps: 20, batch_size: 1, log_every: 5}\n"
                  "checkpoint: {every_steps: 1, keep_last: 2, keep_every: 5, "
                  "keep_at_validation: true}\n"
                  "validation: {prompts: [\"a red square, moving\"], steps: 2, frames: 4, "
                  "height: 16, width: 16, every_steps: 0, at_steps: [3]}\n"));
  CommandResult w = c.Adctl({"wait", id, "--timeout", "600"});
  ASSERT_EQ(w.exit_code, 0) << c.Adctl({"logs", id}).out;
  EXPECT_EQ(OnDisk(id), (std::set<int64_t>{3, 5, 10, 15, 19, 20}));

  CommandResult exported = c.Adctl({"export", id, "--step", "3", "--format", "animatediff", "--out",
                                    c.dir() + "/mm3.safetensors"});
  EXPECT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_TRUE(fs::exists(c.dir() + "/mm3.safetensors"));
}

// A pin made while the job runs keeps its checkpoint past keep_last; a checkpoint deleted by
// hand mid-run does not fail the job; pin and unpin name what is wrong.
TEST_F(CheckpointKeepTest, PinsMadeWhileRunningAreHonouredAndHandDeletionsAreHarmless) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(
      c.WriteSpec("pins",
                  "name: pins\nmodel: {preset: tiny}\n"
                  "data: {kind: synthetic, num_samples: 4, frames: 4, height: 8, width: 8}\n"
                  "train: {max_steps: 16, batch_size: 1, log_every: 4}\n"
                  "checkpoint: {every_steps: 2, keep_last: 2}\n"));
  // The first checkpoint on disk, pinned at once.
  int64_t first = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (first == 0 && std::chrono::steady_clock::now() < deadline) {
    const auto steps = OnDisk(id);
    for (int64_t s : steps) {
      CommandResult pin = c.Adctl({"ckpt", "pin", id, std::to_string(s)});
      if (pin.exit_code == 0) {
        EXPECT_NE(pin.out.find("pinned step " + std::to_string(s)), std::string::npos) << pin.out;
        first = s;
        break;
      }
    }
    if (first == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GT(first, 0) << "no checkpoint to pin appeared";
  // Delete an unpinned checkpoint by hand while the job runs.
  const std::string root = c.Describe(id)["job_dir"].get<std::string>() + "/checkpoints";
  int64_t deleted = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && std::stoll(name.substr(5)) != first) {
      deleted = std::stoll(name.substr(5));
      std::error_code ec;
      fs::remove_all(entry.path(), ec);
      break;
    }
  }
  CommandResult w = c.Adctl({"wait", id, "--timeout", "300"});
  ASSERT_EQ(w.exit_code, 0) << c.Adctl({"logs", id}).out;

  // The pinned one, and the newest two (less the one deleted, had the job ended by then).
  std::set<int64_t> expected = {first, 14, 16};
  expected.erase(deleted);
  std::set<int64_t> pinned;
  EXPECT_EQ(OnDisk(id, &pinned), expected);
  EXPECT_EQ(pinned, (std::set<int64_t>{first}));

  std::string committed;
  for (int64_t s : expected) committed += (committed.empty() ? "" : ", ") + std::to_string(s);
  CommandResult missing = c.Adctl({"ckpt", "pin", id, "3"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(
      missing.err.find("no committed checkpoint at step 3 to pin; committed steps: " + committed),
      std::string::npos)
      << missing.err;
  CommandResult not_pinned = c.Adctl({"ckpt", "unpin", id, "16"});
  EXPECT_EQ(not_pinned.exit_code, 2);
  EXPECT_NE(not_pinned.err.find("step 16 is not pinned"), std::string::npos) << not_pinned.err;
  CommandResult unpin = c.Adctl({"ckpt", "unpin", id, std::to_string(first)});
  EXPECT_EQ(unpin.exit_code, 0) << unpin.err;
  pinned.clear();
  OnDisk(id, &pinned);
  EXPECT_TRUE(pinned.empty());
}

// Issue 30 item 1: the eval loss of held-out clips, where a user looks for it — `adctl
// describe`, the job's JSON (gRPC and the HTTP API), its metric points (overall and per
// timestep) and Prometheus (adctl_eval_loss{job_id, timestep}).
TEST_F(CheckpointKeepTest, EvalLossShowsInDescribeTheApiAndPrometheus) {
  Coordinator& c = *coordinator_;
  const std::string id = c.Submit(
      c.WriteSpec("eval",
                  "name: eval\nmodel: {preset: tiny}\n"
                  "data: {kind: synthetic, num_samples: 6, frames: 4, height: 8, width: 8}\n"
                  "train: {max_steps: 4, batch_size: 1}\n"
                  "eval: {holdout_clips: 2, timesteps: [100, 700], every_steps: 2}\n"
                  "checkpoint: {every_steps: 2, keep_last: 1}\n"));
  ASSERT_EQ(c.Adctl({"wait", id, "--timeout", "300"}).exit_code, 0) << c.Adctl({"logs", id}).out;
  auto job = c.Describe(id);
  const double eval_loss = job["progress"].value("eval_loss", 0.0);
  EXPECT_GT(eval_loss, 0) << job.dump(2);
  EXPECT_EQ(job["progress"].value("eval_step", std::string("0")), "4");
  const std::string text = c.Adctl({"describe", id}).out;
  EXPECT_NE(text.find("Eval loss:"), std::string::npos) << text;
  auto api = c.Http("GET", "/api/v1/jobs/" + id);
  EXPECT_EQ(api.json["progress"].value("eval_loss", 0.0), eval_loss);
  // The metric points: the overall number and one per timestep, at steps 2 and 4.
  auto points = nlohmann::json::parse(c.HttpGet("/api/v1/jobs/" + id + "/metrics"))["points"];
  std::set<std::string> evaluated;
  for (const auto& p : points) {
    if (p.value("eval_loss", -1.0) < 0) continue;
    evaluated.insert(p["step"].get<std::string>());
    EXPECT_EQ(p["eval_by_timestep"].size(), 2u) << p.dump();
  }
  EXPECT_EQ(evaluated, (std::set<std::string>{"2", "4"}));
  const std::string metrics = c.HttpGet("/metrics");
  for (const std::string t : {"all", "100", "700"}) {
    EXPECT_NE(metrics.find("adctl_eval_loss{job_id=\"" + id + "\",timestep=\"" + t + "\"}"),
              std::string::npos)
        << t;
  }
}

}  // namespace
}  // namespace adctl::testing
