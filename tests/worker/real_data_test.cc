// Real data through the real adworker binary on the CPU: a tiny SD folder and encoded videos
// made by adworker itself, preprocessed into a latent cache (bad videos skipped and counted, a
// killed run resumed without losing or duplicating a clip, other settings refused), then
// trained on with caption dropout.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "common/safetensors.h"
#include "common/worker_contract.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/worker_process.h"
#include "worker/data/latent_cache.h"
#include "worker/data/latent_dataset.h"
#include "worker/data/preprocess.h"
#include "worker/model/vae.h"
#include "worker/model/weights.h"
#include "worker/video/frame_sampling.h"
#include "worker/video/video_csv.h"
#include "worker/video/video_reader.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

int RunWorker(const std::vector<std::string>& args, const std::string& log,
              std::chrono::seconds limit = std::chrono::seconds(240), pid_t* started = nullptr,
              const std::function<bool()>& kill_when = nullptr) {
  const pid_t pid = Spawn(args, log);
  if (started != nullptr) *started = pid;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline || (kill_when && kill_when())) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -9;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One tiny SD folder and video set for the whole suite (making them costs seconds).
class RealDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    root_ = dir_->path();
    ASSERT_EQ(RunWorker({ADWORKER, "make-tiny-pretrained", "--out", (root_ / "sd").string()},
                        (root_ / "make-sd.log").string()),
              0)
        << ReadAll((root_ / "make-sd.log").string());
    ASSERT_EQ(
        RunWorker({ADWORKER, "make-videos", "--out", (root_ / "videos").string(), "--clips", "8"},
                  (root_ / "make-videos.log").string()),
        0)
        << ReadAll((root_ / "make-videos.log").string());
    // Three broken rows: a missing file, a text file named .mp4, a video cut in half.
    const auto videos = root_ / "videos";
    std::ofstream(videos / "notavideo.mp4") << "this is not a video\n";
    std::string first;
    for (const auto& e : fs::directory_iterator(videos)) {
      if (e.path().extension() == ".mp4" && e.path().filename() != "notavideo.mp4") {
        first = e.path().string();
        break;
      }
    }
    ASSERT_FALSE(first.empty());
    const std::string bytes = ReadAll(first);
    std::ofstream(videos / "halfcut.mp4", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::ofstream(videos / "videos.csv", std::ios::app)
        << "missing1,\"a clip that, alas, is gone\",x\n"
        << "notavideo,a text file,x\n"
        << "halfcut,half of a video,x\n";
  }
  static void TearDownTestSuite() { dir_.reset(); }

  std::string WriteSpec(const std::string& name, const std::string& yaml) {
    const auto path = root_ / (name + ".yaml");
    std::ofstream(path) << yaml;
    return path.string();
  }

  // `more`: further preprocess fields (", flip: true").
  std::string PreprocessSpec(const std::string& out, int64_t frames, int64_t shard_size,
                             const std::string& more = "") {
    return "kind: preprocess\n"
           "model: {pretrained: " +
           (root_ / "sd").string() +
           "}\n"
           "data: {kind: video, csv: " +
           (root_ / "videos" / "videos.csv").string() +
           ", video_dir: " + (root_ / "videos").string() + ", frames: " + std::to_string(frames) +
           ", stride: 2, sample_height: 32, sample_width: 32}\n"
           "preprocess: {output: " +
           out + ", shard_size: " + std::to_string(shard_size) + ", decode_threads: 2" + more +
           "}\n";
  }

  // Trains the tiny SD folder's motion modules for `steps` steps of batch 1 on latents
  // (`data`: the fields after kind) as job `name`; returns the worker's log, empty on failure.
  std::string TrainTinySteps(const std::string& name, const std::string& data, int steps) {
    const auto spec = WriteSpec(name, "model: {pretrained: " + (root_ / "sd").string() +
                                          "}\ndata: {kind: latents, " + data +
                                          "}\ntrain: {max_steps: " + std::to_string(steps) +
                                          ", batch_size: 1}\ncheckpoint: {every_steps: 0}\n");
    const auto dir = (root_ / ("job-" + name)).string();
    fs::create_directories(dir);
    const std::string log = (root_ / (name + ".log")).string();
    const int code = RunWorker({ADWORKER, "train", "--spec", spec, "--job-dir", dir}, log);
    EXPECT_EQ(code, 0) << ReadAll(log);
    return code == 0 ? ReadAll(log) : std::string();
  }

  static std::unique_ptr<TempDir> dir_;  // removed after the suite's tests
  static fs::path root_;                 // dir_'s path
};

std::unique_ptr<TempDir> RealDataTest::dir_;
fs::path RealDataTest::root_;

TEST_F(RealDataTest, PreprocessSkipsBadVideosResumesAfterKillAndTrainsOnTheCache) {
  const std::string cache = (root_ / "cache").string();
  const auto spec = WriteSpec("pre", PreprocessSpec(cache, 4, 2));
  const auto job = (root_ / "job-pre").string();
  fs::create_directories(job);
  // Killed as soon as its first shard is committed.
  const int killed = RunWorker({ADWORKER, "preprocess", "--spec", spec, "--job-dir", job},
                               (root_ / "pre-1.log").string(), std::chrono::seconds(240), nullptr,
                               [&] { return fs::exists(fs::path(cache) / CacheShardName(0)); });
  ASSERT_EQ(killed, -9) << ReadAll((root_ / "pre-1.log").string());
  ASSERT_FALSE(fs::exists(fs::path(cache) / kCacheIndexFile));
  const auto first_shard_time = fs::last_write_time(fs::path(cache) / CacheShardName(0));

  // The resumed run (two ranks this time) keeps the committed shard and finishes the rest.
  std::vector<std::thread> ranks;
  std::vector<int> codes(2, -1);
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      codes[r] = RunWorker({ADWORKER, "preprocess", "--spec", spec, "--job-dir", job, "--rank",
                            std::to_string(r), "--world-size", "2", "--metrics-out",
                            job + "/metrics-rank" + std::to_string(r) + ".jsonl"},
                           (root_ / ("pre-2-rank" + std::to_string(r) + ".log")).string());
    });
  }
  for (auto& t : ranks) t.join();
  const std::string log0 = ReadAll((root_ / "pre-2-rank0.log").string());
  ASSERT_EQ(codes[0], 0) << log0;
  ASSERT_EQ(codes[1], 0) << ReadAll((root_ / "pre-2-rank1.log").string());
  EXPECT_EQ(fs::last_write_time(fs::path(cache) / CacheShardName(0)), first_shard_time);

  auto index = ReadLatentCacheIndex(cache);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->clips, 8);
  EXPECT_EQ(index->skipped_total, 3);
  EXPECT_EQ(index->skipped["missing"], 1);
  EXPECT_EQ(index->skipped.count("unreadable") + index->skipped.count("truncated"), 2u)
      << Json(index->skipped).dump();
  // Every good video exactly once across the shards, in CSV order.
  std::vector<std::string> ids;
  for (const auto& shard : index->shards) {
    auto file = SafetensorsFile::Open((fs::path(cache) / shard.file).string());
    ASSERT_TRUE(file.ok());
    for (const auto& id : Json::parse((*file)->metadata().at("video_ids"))) ids.push_back(id);
    if (shard.clips > 0) {
      const auto* mean = (*file)->Find("latent_mean");
      ASSERT_NE(mean, nullptr);
      EXPECT_EQ(mean->dtype, DType::kBF16);
      // [n, 4, F, 32/4, 32/4]: the tiny VAE downsamples 4x.
      EXPECT_EQ(mean->shape, (std::vector<int64_t>{shard.clips, 4, 4, 8, 8}));
    }
  }
  EXPECT_EQ(ids.size(), 8u);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 8u);
  EXPECT_NE(log0.find("skipped video missing1 (missing)"), std::string::npos) << log0;
  // Each rank's last metric point counts the skips (and clips) of all its shards, those of the
  // killed attempt too: together, the index's counts.
  std::map<std::string, int64_t> reported;
  int64_t clips_reported = 0;
  for (int r = 0; r < 2; ++r) {
    Json last;
    std::istringstream lines(ReadAll(job + "/metrics-rank" + std::to_string(r) + ".jsonl"));
    for (std::string line; std::getline(lines, line);) {
      Json j = Json::parse(line);
      if (j["event"] == "step") last = j;
    }
    ASSERT_FALSE(last.is_null()) << "rank " << r << " reported no step";
    for (const char* reason : {"missing", "unreadable", "zero_frames", "truncated", "too_short"}) {
      reported[reason] += last.value(std::string("videos_skipped_") + reason, int64_t{0});
    }
    clips_reported += last.value("samples_seen", int64_t{0});
  }
  // And the clips each wrote, the killed attempt's shard included: together, the cache's.
  EXPECT_EQ(clips_reported, index->clips);
  for (const auto& [reason, n] : reported) {
    const auto it = index->skipped.find(reason);
    EXPECT_EQ(n, it == index->skipped.end() ? 0 : it->second) << reason;
  }
  EXPECT_TRUE(fs::exists(fs::path(cache) / kEmptyCaptionFile));

  // Training on the cache, with caption dropout.
  const auto train = WriteSpec("train", "model: {pretrained: " + (root_ / "sd").string() +
                                            "}\n"
                                            "data: {kind: latents, path: " +
                                            cache +
                                            "}\n"
                                            "train: {max_steps: 3, batch_size: 2, "
                                            "caption_dropout: 0.5}\n"
                                            "checkpoint: {every_steps: 0}\n");
  const auto train_dir = (root_ / "job-train").string();
  fs::create_directories(train_dir);
  const int trained = RunWorker({ADWORKER, "train", "--spec", train, "--job-dir", train_dir,
                                 "--metrics-out", train_dir + "/metrics.jsonl"},
                                (root_ / "train.log").string());
  ASSERT_EQ(trained, 0) << ReadAll((root_ / "train.log").string());
  EXPECT_NE(ReadAll(train_dir + "/metrics.jsonl").find("\"step\":3"), std::string::npos);

  // The same output with other settings is refused, naming what differs.
  const auto other = WriteSpec("pre-other", PreprocessSpec(cache, 6, 2));
  const int refused = RunWorker({ADWORKER, "preprocess", "--spec", other, "--job-dir", job},
                                (root_ / "pre-3.log").string());
  EXPECT_EQ(refused, kExitBadSpec);
  const std::string log3 = ReadAll((root_ / "pre-3.log").string());
  EXPECT_NE(log3.find("other settings"), std::string::npos) << log3;
  EXPECT_NE(log3.find("frames 4"), std::string::npos) << log3;
}

// preprocess.windows_per_video and flip (issue 32): every good video gives k clips whose frames
// are the window rule's, each stored with the latents of its left-right flipped pixels (encoded
// from the flipped frames, not flipped latents); a draw takes one of the two from its generator;
// the same output with other windows or without flip is refused, naming what differs.
TEST_F(RealDataTest, WindowsAndFlipGiveMoreClipsAndTrainingDrawsBothSides) {
  const std::string cache = (root_ / "cache-windows").string();
  const auto spec =
      WriteSpec("pre-windows", PreprocessSpec(cache, 4, 4, ", windows_per_video: 3, flip: true"));
  const auto job = (root_ / "job-windows").string();
  fs::create_directories(job);
  const std::string log_path = (root_ / "pre-windows.log").string();
  ASSERT_EQ(RunWorker({ADWORKER, "preprocess", "--spec", spec, "--job-dir", job}, log_path), 0)
      << ReadAll(log_path);
  auto index = ReadLatentCacheIndex(cache);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_EQ(index->clips, 3 * 8);  // 8 good videos, 3 windows each
  EXPECT_EQ(index->skipped_total, 3);
  EXPECT_EQ(index->settings.value("windows_per_video", int64_t{0}), 3);
  EXPECT_EQ(index->settings.value("flip", false), true);

  auto rows = ReadVideoCsv((root_ / "videos" / "videos.csv").string(), (root_ / "videos").string());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  auto vae = LoadAutoencoderKL((root_ / "sd" / "vae").string());
  ASSERT_TRUE(vae.ok()) << vae.status().ToString();
  torch::NoGradGuard no_grad;
  int64_t checked = 0;
  for (const auto& shard : index->shards) {
    if (shard.clips == 0) continue;
    const std::string path = (fs::path(cache) / shard.file).string();
    auto file = SafetensorsFile::Open(path);
    ASSERT_TRUE(file.ok());
    const Json ids = Json::parse((*file)->metadata().at("video_ids"));
    const Json windows = Json::parse((*file)->metadata().at("windows"));
    const Json frames = Json::parse((*file)->metadata().at("frames"));
    ASSERT_EQ(ids.size(), static_cast<size_t>(shard.clips));
    ASSERT_EQ(windows.size(), ids.size());
    auto tensors = ReadTensorFile(path);
    ASSERT_TRUE(tensors.ok());
    ASSERT_TRUE(tensors->count("latent_mean_flip") && tensors->count("latent_std_flip"));
    EXPECT_EQ(tensors->at("latent_mean_flip").sizes(), tensors->at("latent_mean").sizes());
    for (size_t c = 0; c < ids.size(); ++c) {
      // The clip's frames: its row's window rule (data.seed 0, frames 4, stride 2).
      int64_t row = -1;
      for (size_t r = 0; r < rows->size(); ++r) {
        if ((*rows)[r].video_id == ids[c].get<std::string>()) row = static_cast<int64_t>(r);
      }
      ASSERT_GE(row, 0) << ids[c];
      auto reader = VideoReader::Open((*rows)[static_cast<size_t>(row)].path);
      ASSERT_TRUE(reader.ok());
      const int64_t length = reader->info().num_frames;
      const auto starts = WindowStarts(length, 4, 2, 3, /*uniform=*/false, 0, row);
      const int64_t w = windows[c].get<int64_t>();
      auto expected = SampleFrameIndices(length, 4, 2, starts[static_cast<size_t>(w)]);
      ASSERT_TRUE(expected.ok());
      EXPECT_EQ(frames[c].get<std::vector<int64_t>>(), *expected) << ids[c] << " window " << w;
      if (checked++ >= 2) continue;
      // The stored statistics are the VAE's of those frames, and of them flipped left-right.
      auto decoded = reader->ReadFrames(*expected);
      ASSERT_TRUE(decoded.ok());
      auto& f = *decoded;
      auto pixels = PrepareFrames(
          torch::from_blob(f.data.data(), {f.num_frames, f.height, f.width, 3}, torch::kByte), 32,
          32);
      const auto mean = [&](const torch::Tensor& p) {
        return (*vae)->EncodeChunked(p, 16).mean.permute({1, 0, 2, 3}).to(torch::kBFloat16);
      };
      const auto row_of = [&](const char* name) {
        return tensors->at(name)[static_cast<int64_t>(c)].to(torch::kBFloat16);
      };
      EXPECT_TRUE(torch::equal(mean(pixels), row_of("latent_mean"))) << ids[c];
      EXPECT_TRUE(torch::equal(mean(torch::flip(pixels, {3})), row_of("latent_mean_flip")))
          << ids[c];
      EXPECT_FALSE(torch::equal(row_of("latent_mean"), row_of("latent_mean_flip")));
    }
  }
  EXPECT_EQ(checked, 24);

  // A draw: first the side (p = 1/2), then the noise, from the position's generator.
  auto first_shard = ReadTensorFile((fs::path(cache) / index->shards[0].file).string());
  ASSERT_TRUE(first_shard.ok());
  DataSpec data;
  data.kind = DataKind::kLatents;
  data.path = cache;
  auto dataset = OpenLatentDataset(data, first_shard->at("latent_mean").size(1),
                                   first_shard->at("text_states").size(2));
  ASSERT_TRUE(dataset.ok()) << dataset.status().ToString();
  const double scale = index->scaling_factor;
  int flipped = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    const LatentSample drawn = (*dataset)->Draw(0, gen, 0.0);
    auto replay = at::detail::createCPUGenerator(seed);
    const bool flip = torch::rand({1}, replay).item<double>() < 0.5;
    const auto m = first_shard->at(flip ? "latent_mean_flip" : "latent_mean")[0].to(torch::kFloat);
    const auto sd = first_shard->at(flip ? "latent_std_flip" : "latent_std")[0].to(torch::kFloat);
    const auto expected = (m + sd * torch::randn(m.sizes(), replay)) * scale;
    ASSERT_TRUE(torch::allclose(drawn.latents, expected)) << seed;
    flipped += flip;
  }
  EXPECT_GT(flipped, 160);
  EXPECT_LT(flipped, 240);

  // The same output with one window and no flip: refused, naming both.
  const auto plain = WriteSpec("pre-windows-plain", PreprocessSpec(cache, 4, 4));
  const std::string refused_log = (root_ / "pre-windows-plain.log").string();
  EXPECT_EQ(RunWorker({ADWORKER, "preprocess", "--spec", plain, "--job-dir", job}, refused_log),
            kExitBadSpec);
  const std::string said = ReadAll(refused_log);
  EXPECT_NE(said.find("windows_per_video 3 → unset"), std::string::npos) << said;
  EXPECT_NE(said.find("flip true → unset"), std::string::npos) << said;
}

// The nearest aspect ratio on a log scale: landscape, portrait and square videos each find
// theirs; a tie goes to the earlier bucket.
TEST(NearestAspectBucketTest, LandscapePortraitAndSquareFindTheirBucket) {
  const std::vector<PreprocessBucket> buckets = {{512, 320, 16}, {320, 512, 16}, {384, 384, 16}};
  EXPECT_EQ(NearestAspectBucket(1920, 1080, buckets), 0);
  EXPECT_EQ(NearestAspectBucket(1080, 1920, buckets), 1);
  EXPECT_EQ(NearestAspectBucket(640, 600, buckets), 2);
  EXPECT_EQ(NearestAspectBucket(0, 0, buckets), 0);
  // 4:3 is nearer 16:10 than 1:1 (|ln 1.333 − ln 1.6| = 0.18 < 0.29).
  EXPECT_EQ(NearestAspectBucket(640, 480, buckets), 0);
  const std::vector<PreprocessBucket> mirrored = {{64, 32, 8}, {32, 64, 8}};
  EXPECT_EQ(NearestAspectBucket(50, 50, mirrored), 0);
}

// preprocess.buckets (issue 32 item 4): each video lands in the bucket of its nearest aspect
// ratio, resized, cropped and windowed to that bucket's size and frames; each bucket is a cache
// of its own inside the output; a run killed between a shard's bucket files resumes without
// losing or duplicating a clip; training reads the cache as shape buckets, alone or in a mix.
TEST_F(RealDataTest, BucketsSortVideosByAspectRatioAndTrainAsShapeBuckets) {
  const std::string cache = (root_ / "cache-buckets").string();
  const auto spec = WriteSpec("pre-buckets", PreprocessSpec(cache, 4, 4,
                                                            ", buckets: [{width: 32, height: 32, "
                                                            "frames: 4}, {width: 48, height: 32, "
                                                            "frames: 6}]"));
  const std::vector<PreprocessBucket> buckets = {{32, 32, 4}, {48, 32, 6}};
  const auto job = (root_ / "job-buckets").string();
  fs::create_directories(job);
  const fs::path square = fs::path(cache) / "buckets" / "4x32x32";
  const fs::path wide = fs::path(cache) / "buckets" / "6x32x48";
  // Killed once the first bucket's file of shard 0 is there: the shard is done only when every
  // bucket's file of it is.
  const std::string log1 = (root_ / "pre-buckets-1.log").string();
  ASSERT_EQ(RunWorker({ADWORKER, "preprocess", "--spec", spec, "--job-dir", job}, log1,
                      std::chrono::seconds(240), nullptr,
                      [&] { return fs::exists(square / CacheShardName(0)); }),
            -9)
      << ReadAll(log1);
  ASSERT_FALSE(fs::exists(fs::path(cache) / kCacheIndexFile));
  const std::string log2 = (root_ / "pre-buckets-2.log").string();
  ASSERT_EQ(RunWorker({ADWORKER, "preprocess", "--spec", spec, "--job-dir", job, "--metrics-out",
                       job + "/metrics.jsonl"},
                      log2),
            0)
      << ReadAll(log2);

  auto index = ReadLatentCacheIndex(cache);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_TRUE(index->shards.empty());
  EXPECT_EQ(index->clips, 8);
  EXPECT_EQ(index->skipped_total, 3);
  ASSERT_EQ(index->buckets.size(), 2u);
  EXPECT_EQ(index->buckets[0].dir, "buckets/4x32x32");
  EXPECT_EQ(index->buckets[1].dir, "buckets/6x32x48");
  EXPECT_EQ(index->buckets[1].frames, 6);
  EXPECT_GT(index->buckets[0].clips, 0);
  EXPECT_GT(index->buckets[1].clips, 0);
  EXPECT_EQ(index->buckets[0].clips + index->buckets[1].clips, 8);
  // The last metric point counts the clips of both attempts: the cache's.
  Json last;
  std::istringstream lines(ReadAll(job + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    Json j = Json::parse(line);
    if (j["event"] == "step") last = j;
  }
  EXPECT_EQ(last.value("samples_seen", int64_t{0}), 8) << last.dump();

  auto rows = ReadVideoCsv((root_ / "videos" / "videos.csv").string(), (root_ / "videos").string());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::set<std::string> seen;
  for (size_t b = 0; b < 2; ++b) {
    const fs::path dir = b == 0 ? square : wide;
    auto sub = ReadLatentCacheIndex(dir.string());
    ASSERT_TRUE(sub.ok()) << sub.status().ToString();
    EXPECT_EQ(sub->clips, index->buckets[b].clips);
    EXPECT_EQ(sub->settings_hash, index->settings_hash);
    EXPECT_TRUE(fs::exists(dir / kEmptyCaptionFile));
    for (const auto& shard : sub->shards) {
      auto file = SafetensorsFile::Open((dir / shard.file).string());
      ASSERT_TRUE(file.ok());
      const Json ids = Json::parse((*file)->metadata().at("video_ids"));
      const Json frames = Json::parse((*file)->metadata().at("frames"));
      // The rows' skipped videos are recorded once, in the first bucket's shard.
      if (b == 1) {
        EXPECT_EQ(Json::parse((*file)->metadata().at("skipped")).size(), 0u);
      }
      for (size_t c = 0; c < ids.size(); ++c) {
        const std::string id = ids[c].get<std::string>();
        EXPECT_TRUE(seen.insert(id).second) << id << " twice";
        EXPECT_EQ(frames[c].size(), static_cast<size_t>(buckets[b].frames)) << id;
        for (const auto& row : *rows) {
          if (row.video_id != id) continue;
          auto reader = VideoReader::Open(row.path);
          ASSERT_TRUE(reader.ok());
          EXPECT_EQ(NearestAspectBucket(reader->info().width, reader->info().height, buckets),
                    static_cast<int>(b))
              << id << " is " << reader->info().width << "x" << reader->info().height;
        }
      }
      if (shard.clips == 0) continue;
      // [n, 4, F, H/4, W/4]: the tiny VAE downsamples 4x.
      EXPECT_EQ((*file)->Find("latent_mean")->shape,
                (std::vector<int64_t>{shard.clips, 4, buckets[b].frames, buckets[b].height / 4,
                                      buckets[b].width / 4}));
    }
  }
  EXPECT_EQ(seen.size(), 8u);

  // Training on the cache: its buckets are the run's shape buckets.
  std::string said = TrainTinySteps("train-buckets", "path: " + cache, 3);
  EXPECT_NE(said.find("2 shape buckets"), std::string::npos) << said;
  // In a mix, beside one of its own buckets (a cache of its own): one source a bucket.
  said = TrainTinySteps(
      "train-buckets-mix",
      "sources: [{path: " + cache + ", weight: 2}, {path: " + square.string() + ", weight: 1}]", 2);
  EXPECT_NE(said.find(cache + " [6x8x12]"), std::string::npos) << said;
  EXPECT_NE(said.find(cache + " [4x8x8]"), std::string::npos) << said;
}

// A training job with a validation section renders MP4 + GIF samples and a grid at the asked
// steps, and exports its motion modules for the inference tools at the end.
TEST_F(RealDataTest, ValidationSamplesAreVideosAndTheEndExportsBothFormats) {
  const auto spec = WriteSpec(
      "validate", "name: validate\nmodel: {pretrained: " + (root_ / "sd").string() +
                      "}\n"
                      "data: {kind: synthetic, num_samples: 4, frames: 4, height: 8, width: 8}\n"
                      "train: {max_steps: 3, batch_size: 1}\n"
                      "checkpoint: {every_steps: 0}\n"
                      "validation: {prompts: [\"a red square, moving\", a blue circle], "
                      "negative_prompt: blurry, steps: 3, frames: 4, height: 32, width: 32, "
                      "every_steps: 0, at_steps: [2]}\n"
                      "export: {formats: [diffusers, animatediff]}\n");
  const auto dir = (root_ / "job-validate").string();
  fs::create_directories(dir);
  const auto log = (root_ / "validate.log").string();
  ASSERT_EQ(RunWorker({ADWORKER, "train", "--spec", spec, "--job-dir", dir}, log), 0)
      << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("validation step 2: 2 samples in"), std::string::npos)
      << ReadAll(log);

  const auto samples = fs::path(dir) / "samples" / "step-00000002";
  const Json index = Json::parse(ReadAll((samples / "samples.json").string()));
  EXPECT_EQ(index["step"], 2);
  ASSERT_EQ(index["samples"].size(), 2u);
  EXPECT_EQ(index["samples"][0]["prompt"], "a red square, moving");
  EXPECT_GT(index["seconds"].get<double>(), 0);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "samples" / "step-00000001"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "samples" / "step-00000003"));
  // Playable files: frame count, size and frame rate as asked (8 fps, AnimateDiff's).
  struct Expect {
    std::string file;
    int width;
  };
  for (const Expect& e : {Expect{"sample-0.mp4", 32}, Expect{"sample-1.gif", 32},
                          Expect{"grid.mp4", 66}, Expect{"grid.gif", 66}}) {
    SCOPED_TRACE(e.file);
    auto reader = VideoReader::Open((samples / e.file).string());
    ASSERT_TRUE(reader.ok()) << reader.ToString();
    const auto& info = reader.value().info();
    EXPECT_EQ(info.width, e.width);
    EXPECT_EQ(info.height, 32);
    EXPECT_NEAR(info.fps, 8.0, 0.01);
    auto frames = reader.value().ReadAll();
    ASSERT_TRUE(frames.ok()) << frames.ToString();
    EXPECT_EQ(frames.value().num_frames, 4);
  }

  const auto exported = fs::path(dir) / "export" / "step-00000003";
  auto file = SafetensorsFile::Open((exported / "motion_module.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->metadata().at("motion_norm"), "per_frame");
  EXPECT_EQ((*file)->metadata().at("adctl_step"), "3");
  bool has_pe = false;
  for (const auto& t : (*file)->tensors()) {
    has_pe = has_pe || t.name.find("attention_blocks.0.pos_encoder.pe") != std::string::npos;
  }
  EXPECT_TRUE(has_pe);
  const Json config = Json::parse(ReadAll((exported / "motion_adapter" / "config.json").string()));
  EXPECT_EQ(config["_class_name"], "MotionAdapter");
  EXPECT_EQ(config["motion_norm"], "per_frame");
  EXPECT_FALSE(fs::exists(exported / "motion_adapter.live"));
}

// A validation clip the motion modules cannot take fails at start-up, naming the field.
TEST_F(RealDataTest, ValidationClipTheModelCannotTakeIsABadSpec) {
  const auto spec =
      WriteSpec("validate-bad",
                "model: {pretrained: " + (root_ / "sd").string() +
                    "}\n"
                    "data: {kind: synthetic, num_samples: 4, frames: 4, height: 8, width: 8}\n"
                    "train: {max_steps: 1}\n"
                    "validation: {prompts: [a cat], frames: 40, height: 32, width: 32}\n");
  const auto dir = (root_ / "job-validate-bad").string();
  fs::create_directories(dir);
  const auto log = (root_ / "validate-bad.log").string();
  EXPECT_EQ(RunWorker({ADWORKER, "train", "--spec", spec, "--job-dir", dir}, log), kExitBadSpec);
  EXPECT_NE(ReadAll(log).find("validation.frames: 40, the motion modules hold at most 32"),
            std::string::npos)
      << ReadAll(log);
}

TEST_F(RealDataTest, DatasetWithoutAnyVideoFailsBeforeLoadingModels) {
  const auto csv = root_ / "empty.csv";
  std::ofstream(csv) << "videoid,name,page_dir\nnope1,gone,x\nnope2,gone too,x\n";
  const auto spec = WriteSpec(
      "nothing", "kind: preprocess\nmodel: {pretrained: " + (root_ / "sd").string() +
                     "}\ndata: {kind: video, csv: " + csv.string() +
                     ", video_dir: " + (root_ / "videos").string() +
                     "}\npreprocess: {output: " + (root_ / "cache-none").string() + "}\n");
  const int rc = RunWorker({ADWORKER, "preprocess", "--spec", spec, "--job-dir", root_.string()},
                           (root_ / "nothing.log").string());
  EXPECT_EQ(rc, kExitDataError);
  const std::string log = ReadAll((root_ / "nothing.log").string());
  EXPECT_NE(log.find("none of the 2 videos listed"), std::string::npos) << log;
}

TEST(PrepareFrames, ResizesTheShortSideAndCropsTheCenter) {
  // A 40x80 frame whose left half is black and right half white, with a red column at x = 40.
  auto frames = torch::zeros({2, 40, 80, 3}, torch::kByte);
  frames.slice(2, 40, 80).fill_(255);
  auto out = PrepareFrames(frames, 20, 20);
  ASSERT_EQ(out.sizes(), torch::IntArrayRef({2, 3, 20, 20}));
  // Resized to 20x40, cropped to columns [10, 30): black on the left, white on the right.
  EXPECT_NEAR(out[0][0][10][0].item<double>(), -1.0, 1e-5);
  EXPECT_NEAR(out[0][0][10][19].item<double>(), 1.0, 1e-5);
  EXPECT_LE(out.max().item<double>(), 1.0 + 1e-6);
  EXPECT_GE(out.min().item<double>(), -1.0 - 1e-6);
}

}  // namespace
}  // namespace adctl
