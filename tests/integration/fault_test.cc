// Faults of the machine under a real adctld (label fault): the disk under its database fills up
// while a job trains. Needs root to mount a small tmpfs; skips, saying so, where mounting is not
// permitted.
#include <sys/mount.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/integration/harness.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;

// A tmpfs of `megabytes` at `path`, unmounted (lazily) when this goes away.
class SmallDisk {
 public:
  SmallDisk(std::string path, int megabytes) : path_(std::move(path)) {
    fs::create_directories(path_);
    const std::string options = "size=" + std::to_string(megabytes) + "m,mode=0700";
    if (mount("tmpfs", path_.c_str(), "tmpfs", 0, options.c_str()) != 0) {
      why_not_ = std::string("cannot mount a tmpfs here: ") + std::strerror(errno);
    }
  }
  ~SmallDisk() {
    if (why_not_.empty()) umount2(path_.c_str(), MNT_DETACH);
  }
  const std::string& why_not() const { return why_not_; }

  // Writes a file until the disk is full; returns its path.
  std::string Fill() const {
    const std::string filler = path_ + "/filler";
    std::ofstream out(filler, std::ios::binary);
    const std::string block(1 << 16, 'x');
    while (out.write(block.data(), block.size())) {
    }
    return filler;
  }

 private:
  std::string path_;
  std::string why_not_;
};

TEST(FaultTest, DiskFullUnderTheDatabaseLosesNoMetricsAndSaysWhy) {
  if (!HaveAdworker()) GTEST_SKIP() << "no adworker";
  Coordinator c(1);
  SmallDisk disk(c.dir() + "/data", 48);  // adctld's data directory: database and job folders
  if (!disk.why_not().empty()) GTEST_SKIP() << disk.why_not();
  c.Start();
  // Enough steps to outlast the fill and the 4 s of full disk below, few enough for a loaded
  // 2-core machine (1.1 s a step there while two builds ran beside the test).
  const int kSteps = 150;
  const std::string id = c.Submit(c.WriteSpec("full",
                                              "name: full\n"
                                              "model: {preset: tiny}\n"
                                              "data: {kind: synthetic, num_samples: 16, "
                                              "frames: 4, height: 8, width: 8}\n"
                                              "train: {max_steps: " +
                                                  std::to_string(kSteps) +
                                                  ", batch_size: 1, log_every: 1}\n"
                                                  "checkpoint: {enabled: false}\n"));
  c.WaitUntil(
      id, [](const nlohmann::json& j) { return Step(j) >= 5; }, 240, "step 5");

  // The disk fills while the rank trains: adctld cannot record its reports.
  const std::string filler = disk.Fill();
  const int64_t full_at = Step(c.Describe(id));
  std::this_thread::sleep_for(std::chrono::seconds(4));
  const std::string log = ReadFile(c.dir() + "/adctld.log");
  EXPECT_NE(log.find("full"), std::string::npos)
      << "adctld did not say its disk is full:\n"
      << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  // Reads still work while writes fail.
  auto during = c.Describe(id);
  EXPECT_EQ(during["state"], "JOB_STATE_RUNNING") << during.dump(2);

  fs::remove(filler);
  EXPECT_EQ(c.Adctl({"wait", id, "--timeout", "270"}).exit_code, 0);
  auto job = c.Describe(id);
  EXPECT_EQ(job["state"], "JOB_STATE_SUCCEEDED") << job.dump(2);
  EXPECT_EQ(Step(job), kSteps);
  // Every step's metric point reached the database: the rank kept what adctld refused and sent
  // it again once the disk had room.
  auto points = nlohmann::json::parse(c.HttpGet("/api/v1/jobs/" + id + "/metrics?max_points=20000"),
                                      nullptr, false)["points"];
  std::set<int64_t> steps;
  for (const auto& p : points) steps.insert(std::stoll(p["step"].get<std::string>()));
  EXPECT_EQ(static_cast<int>(steps.size()), kSteps) << "disk filled at step " << full_at;
  c.Stop();
}

// A checkpoint folder on a disk too small for a checkpoint: the job fails at once (no retry: the
// disk will not grow), its exit class says it could not write its output, and the job's message
// carries the rank's own reason (issue 35 item 1), in `describe` and `wait -o json` alike.
TEST(FaultTest, ACheckpointOnAFullDiskFailsTheJobSayingWhy) {
  if (!HaveAdworker()) GTEST_SKIP() << "no adworker";
  Coordinator c(1);
  const std::string out = c.dir() + "/out";
  SmallDisk disk(out + "/small", 1);  // 1 MB: a tiny preset's checkpoint needs several
  if (!disk.why_not().empty()) GTEST_SKIP() << disk.why_not();
  c.SetExtraArgs({"--write-root", out});
  c.Start();
  const std::string id = c.Submit(c.WriteSpec("small",
                                              "name: small\n"
                                              "model: {preset: tiny}\n"
                                              "data: {kind: synthetic, num_samples: 8, "
                                              "frames: 4, height: 8, width: 8}\n"
                                              "train: {max_steps: 6, batch_size: 1}\n"
                                              "checkpoint: {every_steps: 2, dir: " +
                                                  out +
                                                  "/small/ckpt}\n"
                                                  "resources: {max_restarts: 3}\n"));
  const auto waited = c.Adctl({"-o", "json", "wait", id, "--timeout", "240"});
  EXPECT_EQ(waited.exit_code, 1) << waited.out << waited.err;
  const auto job = c.Describe(id);
  EXPECT_EQ(job["state"], "JOB_STATE_FAILED") << job.dump(2);
  const std::string message = job["message"];
  EXPECT_NE(message.find("exited with code 5 (cannot write its output"), std::string::npos)
      << message;
  EXPECT_NE(message.find("checkpoint step 2"), std::string::npos) << message;
  EXPECT_NE(message.find("/small/ckpt"), std::string::npos) << "names the folder: " << message;
  EXPECT_EQ(job.value("restarts", 0), 0) << "a full disk is not retried";
  EXPECT_NE(waited.out.find("checkpoint step 2"), std::string::npos)
      << "wait -o json carries the reason: " << waited.out;
  c.Stop();
}

}  // namespace
}  // namespace adctl::testing
