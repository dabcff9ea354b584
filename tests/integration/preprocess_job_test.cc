// A preprocess job as its user sees it (issue 35 item 3), end to end on CPU (real adctld, adctl,
// adworker, videos made by adworker): its own progress — shards, clips written, videos skipped by
// reason, videos/s — in `adctl describe`, `adctl ls`, the JSON API and the events, its own
// Prometheus series, and nothing dressed as training (no loss, no checkpoint line, no
// adctl_train_* series, no "training started").
#include <filesystem>
#include <fstream>

#include "tests/integration/harness.h"

namespace adctl::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class PreprocessJobTest : public CoordinatorTest<1> {
 protected:
  // Runs `adworker ARGS` and fails the test when it does not exit 0.
  void Adworker(const std::string& args, const std::string& log) {
    const std::string command = AdworkerPath() + " " + args + " > " + log + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << ReadFile(log);
  }
};

TEST_F(PreprocessJobTest, ShowsItsOwnProgressAndNothingOfTraining) {
  Coordinator& c = *coordinator_;
  const std::string sd = c.dir() + "/sd", videos = c.dir() + "/videos";
  Adworker("make-tiny-pretrained --out " + sd, c.dir() + "/make-sd.log");
  Adworker("make-videos --out " + videos + " --clips 5", c.dir() + "/make-videos.log");
  // Two rows that cannot be cached: a missing file and a text file named .mp4.
  std::ofstream(videos + "/notavideo.mp4") << "this is not a video\n";
  std::ofstream(videos + "/videos.csv", std::ios::app)
      << "gone,a clip that is gone,x\nnotavideo,a text file,x\n";

  const std::string id = c.Submit(
      c.WriteSpec("cache", "name: cache\nkind: preprocess\nmodel: {pretrained: " + sd +
                               "}\n"
                               "data: {kind: video, csv: " +
                               videos + "/videos.csv, video_dir: " + videos +
                               ", frames: 4, stride: 2, sample_height: 32, sample_width: 32}\n"
                               "preprocess: {output: " +
                               c.dir() + "/cache, shard_size: 2}\n"));
  CommandResult w = c.Adctl({"wait", id, "--timeout", "300"});
  ASSERT_EQ(w.exit_code, 0) << w.out << w.err << c.Adctl({"logs", id}).out;
  // A preprocess job writes a cache, not checkpoints: wait names no checkpoint folder.
  EXPECT_EQ(w.out.find("checkpoints:"), std::string::npos) << w.out;

  // The JSON API: progress.preprocess sums the ranks' newest reports.
  const json job = c.Http("GET", "/api/v1/jobs/" + id).json;
  const json& pre = job["progress"]["preprocess"];
  ASSERT_TRUE(pre.is_object()) << job.dump(2);
  EXPECT_EQ(pre.value("clips_written", std::string()), "5") << pre.dump();
  EXPECT_EQ(pre.value("shards_written", std::string()), "4") << pre.dump();  // 7 videos by 2
  EXPECT_EQ(pre.value("shards", std::string()), "4") << pre.dump();
  EXPECT_EQ(pre["videos_skipped"].value("missing", std::string()), "1") << pre.dump();
  EXPECT_EQ(pre["videos_skipped"].value("unreadable", std::string()), "1") << pre.dump();
  EXPECT_EQ(pre["videos_skipped"].value("truncated", std::string("0")), "0") << pre.dump();
  EXPECT_GT(pre.value("videos_per_second", 0.0), 0) << pre.dump();

  // adctl describe: its own progress line, the skips by reason, no loss, no checkpoint line.
  CommandResult d = c.Adctl({"describe", id});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("Progress:   shards 4/4 (100%), 5 clips written, 2 skipped (missing 1, "
                       "unreadable 1)"),
            std::string::npos)
      << d.out;
  EXPECT_NE(d.out.find("Trains:     preprocessing"), std::string::npos) << d.out;
  EXPECT_EQ(d.out.find("loss"), std::string::npos) << d.out;
  EXPECT_EQ(d.out.find("Checkpoint:"), std::string::npos) << d.out;
  // adctl ls: no loss for it.
  CommandResult ls = c.Adctl({"ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  const size_t row = ls.out.find(id);
  ASSERT_NE(row, std::string::npos) << ls.out;
  EXPECT_EQ(ls.out.substr(row, ls.out.find('\n', row) - row).find("0.0"), std::string::npos)
      << ls.out;

  // Events: "preprocessing started", never "training started".
  bool started = false;
  for (const json& e : c.AdctlJson({"events", id}).value("events", json::array())) {
    const std::string message = e.value("message", "");
    EXPECT_EQ(message.find("training started"), std::string::npos) << message;
    if (message.find("preprocessing started (rank 0: 4 shards)") != std::string::npos) {
      started = true;
    }
  }
  EXPECT_TRUE(started);

  // Prometheus: the adctl_preprocess_* series of its rank, no training series.
  const std::string metrics = c.HttpGet("/metrics");
  const std::string job_label = "job_id=\"" + id + "\"";
  for (const std::string& line :
       {"adctl_preprocess_clips_written{" + job_label + ",rank=\"0\"} 5",
        "adctl_preprocess_shards_written{" + job_label + ",rank=\"0\"} 4",
        "adctl_preprocess_shards{" + job_label + ",rank=\"0\"} 4",
        "adctl_preprocess_videos_skipped{" + job_label + ",rank=\"0\",reason=\"missing\"} 1",
        "adctl_preprocess_videos_skipped{" + job_label + ",rank=\"0\",reason=\"unreadable\"} 1",
        "adctl_preprocess_videos_per_second{" + job_label + "}",
        "adctl_job_info{" + job_label +
            ",lora_rank=\"0\",name=\"cache\",trains=\"preprocess\"} 1"}) {
    EXPECT_NE(metrics.find(line), std::string::npos) << line;
  }
  for (const char* family : {"adctl_train_loss{", "adctl_train_global_step{",
                             "adctl_train_clips_per_second{", "adctl_train_learning_rate{"}) {
    EXPECT_EQ(metrics.find(std::string(family) + job_label), std::string::npos) << family;
  }
}

}  // namespace
}  // namespace adctl::testing
