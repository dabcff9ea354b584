#include "worker/data/preprocess.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/fs_util.h"
#include "common/safetensors.h"
#include "common/sha256.h"
#include "common/worker_contract.h"
#include "worker/compat.h"
#include "worker/data/latent_cache.h"
#include "worker/model/clip_text.h"
#include "worker/model/pretrained.h"
#include "worker/model/vae.h"
#include "worker/model/weights.h"
#include "worker/text/clip_tokenizer.h"
#include "worker/video/ffmpeg_log.h"
#include "worker/video/frame_sampling.h"
#include "worker/video/video_csv.h"
#include "worker/video/video_reader.h"

namespace adctl {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;
using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

torch::Tensor PrepareFrames(const torch::Tensor& frames_u8, int64_t height, int64_t width) {
  auto x = frames_u8.permute({0, 3, 1, 2}).to(torch::kFloat).div(255.0);  // [F, 3, H, W]
  const int64_t h = x.size(2), w = x.size(3);
  // torchvision Resize(size) on the short side, generalised to cover a non-square h × w.
  const double scale = std::max(static_cast<double>(height) / static_cast<double>(h),
                                static_cast<double>(width) / static_cast<double>(w));
  int64_t new_h, new_w;
  if (h <= w) {
    new_h = std::max<int64_t>(height, static_cast<int64_t>(std::llround(h * scale)));
    new_w = static_cast<int64_t>(static_cast<double>(new_h) * w / h);  // torchvision truncates
  } else {
    new_w = std::max<int64_t>(width, static_cast<int64_t>(std::llround(w * scale)));
    new_h = static_cast<int64_t>(static_cast<double>(new_w) * h / w);
  }
  new_h = std::max(new_h, height);
  new_w = std::max(new_w, width);
  if (new_h != h || new_w != w) {
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{new_h, new_w})
                              .mode(torch::kBilinear)
                              .align_corners(false)
                              .antialias(true));
  }
  // torchvision CenterCrop: offsets rounded half to even of (size − crop) / 2.
  const int64_t top = static_cast<int64_t>(std::nearbyint((new_h - height) / 2.0));
  const int64_t left = static_cast<int64_t>(std::nearbyint((new_w - width) / 2.0));
  x = x.slice(2, top, top + height).slice(3, left, left + width);
  return (x * 2.0 - 1.0).contiguous();
}

int NearestAspectBucket(int64_t width, int64_t height,
                        const std::vector<PreprocessBucket>& buckets) {
  if (width <= 0 || height <= 0) return 0;
  const double aspect = std::log(static_cast<double>(width) / static_cast<double>(height));
  int best = 0;
  double best_distance = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const double distance = std::abs(aspect - std::log(static_cast<double>(buckets[b].width) /
                                                       static_cast<double>(buckets[b].height)));
    if (b == 0 || distance < best_distance) {
      best = static_cast<int>(b);
      best_distance = distance;
    }
  }
  return best;
}

namespace {

// One CSV row after decoding: the prepared pixels, or why it was skipped.
// One video's windows (preprocess.windows_per_video), each a clip of the cache.
struct DecodedClip {
  int64_t row = 0;
  int bucket = 0;  // preprocess.buckets' entry its aspect ratio chose
  std::string video_id, caption;
  std::vector<torch::Tensor> windows;        // [F, 3, H, W] in [−1, 1] each; empty when skipped
  std::vector<std::vector<int64_t>> frames;  // each window's frame indices
  std::string skip_reason, skip_detail;
  bool skipped() const { return windows.empty(); }
};

std::string ShortMessage(const Status& st) {
  std::string m = st.message();
  return m.size() > 300 ? m.substr(0, 300) + "..." : m;
}

// sha256 of a model folder's config and weights file (what the cache depends on).
Result<std::string> HashModelDir(const std::string& dir) {
  auto weights = FindModelWeights(dir);
  if (!weights.ok()) return weights.status();
  std::string joined;
  for (const std::string& path : {dir + "/config.json", *weights}) {
    auto h = Sha256File(path);
    if (!h.ok()) return h.status();
    joined += *h;
  }
  return Sha256Hex(joined);
}

Result<std::string> HashFiles(const std::vector<std::string>& paths) {
  std::string joined;
  for (const auto& path : paths) {
    if (!fs::exists(path)) continue;
    auto h = Sha256File(path);
    if (!h.ok()) return h.status();
    joined += fs::path(path).filename().string() + ":" + *h;
  }
  return Sha256Hex(joined);
}

Status WriteShardAtomically(const std::string& path, const TensorMap& tensors,
                            const std::map<std::string, std::string>& metadata) {
  const std::string tmp = path + ".tmp";
  if (tensors.empty()) {
    ADCTL_RETURN_IF_ERROR(WriteSafetensors(tmp, {}, metadata));
  } else {
    ADCTL_RETURN_IF_ERROR(WriteTensorFile(tmp, tensors, metadata));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Internal(path + ": rename failed: " + ec.message());
  return Status::Ok();
}

class Preprocess {
 public:
  explicit Preprocess(const TrainerOptions& o)
      : o_(o), spec_(o.spec), reporter_(*o.reporter), out_(o.spec.preprocess.output) {}

  int Execute() {
    try {
      if (auto f = Setup()) return Fail(*f);
      if (auto f = Run()) return Fail(*f);
      return kExitOk;
    } catch (const std::exception& e) {
      return Fail({kExitCrash, std::string("preprocess: ") + e.what()});
    }
  }

 private:
  int Fail(const Failure& f) {
    reporter_.OnEvent(f.exit_code == kExitStopped ? EventLevel::kInfo : EventLevel::kError,
                      f.message);
    return f.exit_code;
  }

  std::optional<Failure> Setup() {
    const auto& d = spec_.data;
    if (!HaveFfmpeg()) {
      return Failure{kExitBadSpec,
                     "data.kind video: this adworker was built without FFmpeg, so it cannot "
                     "decode videos (rebuild with libavcodec-dev, libavformat-dev, "
                     "libswscale-dev)"};
    }
    VideoCsvOptions csv_options;
    csv_options.id_column = d.id_column;
    csv_options.caption_column = d.caption_column;
    csv_options.file_pattern = d.file_pattern;
    auto entries = ReadVideoCsv(d.csv, d.video_dir, csv_options);
    if (!entries.ok()) return Failure{kExitDataError, entries.status().ToString()};
    entries_ = std::move(*entries);
    if (spec_.preprocess.max_clips > 0 &&
        static_cast<int64_t>(entries_.size()) > spec_.preprocess.max_clips) {
      entries_.resize(static_cast<size_t>(spec_.preprocess.max_clips));
    }
    if (entries_.empty()) return Failure{kExitDataError, "data.csv: " + d.csv + " lists no video"};
    // A dataset without a single video file fails here, before any model or GPU is taken.
    const bool any = std::any_of(entries_.begin(), entries_.end(),
                                 [](const VideoEntry& e) { return fs::exists(e.path); });
    if (!any) {
      return Failure{kExitDataError, "data: none of the " + std::to_string(entries_.size()) +
                                         " videos listed in " + d.csv +
                                         " exists (first: " + entries_.front().path + ")"};
    }
    shard_size_ = spec_.preprocess.shard_size;
    bucketed_ = !spec_.preprocess.buckets.empty();
    buckets_ = bucketed_
                   ? spec_.preprocess.buckets
                   : std::vector<PreprocessBucket>{{d.sample_width, d.sample_height, d.frames}};
    num_shards_ = (static_cast<int64_t>(entries_.size()) + shard_size_ - 1) / shard_size_;

    const auto& pretrained = spec_.model.pretrained;
    auto vae_dir = PretrainedComponent(pretrained, "vae");
    auto text_dir = PretrainedComponent(pretrained, "text_encoder");
    auto tok_dir = PretrainedComponent(pretrained, "tokenizer");
    for (const auto* r : {&vae_dir, &text_dir, &tok_dir}) {
      if (!r->ok()) return Failure{kExitModelError, r->status().ToString()};
    }
    if (auto f = ComputeSettings(*vae_dir, *text_dir, *tok_dir)) return f;
    if (auto f = CheckExistingCache()) return f;

    device_ = compat::ComputeDevice();
    compute_dtype_ = compat::ComputeDtype(spec_.train.precision, device_);
    if (device_.is_cuda()) at::globalContext().setBenchmarkCuDNN(spec_.train.cudnn_benchmark);
    store_dtype_ = spec_.preprocess.dtype == CacheDtype::kFp16 ? torch::kHalf : torch::kBFloat16;

    auto tokenizer = ClipTokenizer::Load(*tok_dir);
    if (!tokenizer.ok()) return Failure{kExitModelError, tokenizer.status().ToString()};
    tokenizer_.emplace(std::move(*tokenizer));
    auto text = LoadClipTextModel(*text_dir);
    if (!text.ok()) return Failure{kExitModelError, text.status().ToString()};
    text_encoder_ = *text;
    if (tokenizer_->vocab_size() > text_encoder_->config().vocab_size) {
      return Failure{kExitModelError, "model.pretrained: the tokenizer has " +
                                          std::to_string(tokenizer_->vocab_size()) +
                                          " tokens, the text encoder's vocabulary " +
                                          std::to_string(text_encoder_->config().vocab_size)};
    }
    auto vae = LoadAutoencoderKL(*vae_dir);
    if (!vae.ok()) return Failure{kExitModelError, vae.status().ToString()};
    vae_ = *vae;
    text_encoder_->to(device_, compute_dtype_);
    vae_->to(device_, compute_dtype_);
    reporter_.OnEvent(EventLevel::kInfo, "preprocess: " + std::to_string(entries_.size()) +
                                             " videos in " + std::to_string(num_shards_) +
                                             " shards of " + std::to_string(shard_size_) + " → " +
                                             out_ + " (settings " + settings_hash_.substr(0, 12) +
                                             ")");
    return std::nullopt;
  }

  std::optional<Failure> ComputeSettings(const std::string& vae_dir, const std::string& text_dir,
                                         const std::string& tok_dir) {
    const auto& d = spec_.data;
    const auto& p = spec_.preprocess;
    auto csv_hash = Sha256File(d.csv);
    auto vae_hash = HashModelDir(vae_dir);
    auto text_hash = HashModelDir(text_dir);
    auto tok_hash = HashFiles({tok_dir + "/vocab.json", tok_dir + "/merges.txt",
                               tok_dir + "/bpe_simple_vocab_16e6.txt.gz"});
    for (const auto* r : {&csv_hash, &vae_hash, &text_hash, &tok_hash}) {
      if (!r->ok()) return Failure{kExitModelError, r->status().ToString()};
    }
    auto vae_config = ReadTextFile(vae_dir + "/config.json");
    if (!vae_config.ok()) return Failure{kExitModelError, vae_config.status().ToString()};
    auto parsed = ParseVaeConfig(*vae_config, vae_dir + "/config.json");
    if (!parsed.ok()) return Failure{kExitModelError, parsed.status().ToString()};
    scaling_factor_ = parsed->scaling_factor;
    settings_ = {{"frames", d.frames},
                 {"stride", d.stride},
                 {"sample_height", d.sample_height},
                 {"sample_width", d.sample_width},
                 {"seed", d.seed},
                 {"csv_sha256", *csv_hash},
                 {"video_dir", fs::absolute(d.video_dir).lexically_normal().string()},
                 {"id_column", d.id_column},
                 {"caption_column", d.caption_column},
                 {"file_pattern", d.file_pattern},
                 {"max_clips", p.max_clips},
                 {"min_frames", p.min_frames},
                 {"shard_size", p.shard_size},
                 {"dtype", Name(p.dtype)},
                 {"vae_sha256", *vae_hash},
                 {"text_encoder_sha256", *text_hash},
                 {"tokenizer_sha256", *tok_hash},
                 {"scaling_factor", scaling_factor_}};
    // Recorded when set, so a one-window cache made before these fields keeps its hash and a
    // cache with other windows or flip is refused naming them.
    if (p.windows_per_video != 1 || p.window_placement != WindowPlacement::kRandom) {
      settings_["windows_per_video"] = p.windows_per_video;
      settings_["window_placement"] = Name(p.window_placement);
    }
    if (p.flip) settings_["flip"] = true;
    if (bucketed_) {
      Json buckets = Json::array();
      for (const PreprocessBucket& b : buckets_) {
        buckets.push_back({{"width", b.width}, {"height", b.height}, {"frames", b.frames}});
      }
      settings_["buckets"] = std::move(buckets);
    }
    settings_hash_ = Sha256Hex(settings_.dump());
    return std::nullopt;
  }

  // Refuses a cache made with other settings; rank 0 records the settings of a new one.
  std::optional<Failure> CheckExistingCache() {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (Status made = MakePrivateDirectories((fs::path(BucketDir(b)) / kCacheShardDir).string());
          !made.ok()) {
        return Failure{kExitStorageError, "preprocess.output: " + made.message()};
      }
    }
    const fs::path settings_path = fs::path(out_) / "settings.json";
    if (fs::exists(settings_path)) {
      std::ifstream in(settings_path);
      Json existing;
      try {
        in >> existing;
      } catch (const std::exception& e) {
        return Failure{kExitDataError, settings_path.string() + ": unreadable: " + e.what()};
      }
      if (existing != settings_) {
        std::string diff;
        for (const auto& [key, value] : settings_.items()) {
          if (!existing.contains(key) || existing[key] != value) {
            diff += (diff.empty() ? "" : "; ") + key + " " +
                    (existing.contains(key) ? existing[key].dump() : "unset") + " → " +
                    value.dump();
          }
        }
        for (const auto& [key, value] : existing.items()) {
          if (!settings_.contains(key)) {
            diff += (diff.empty() ? "" : "; ") + key + " " + value.dump() + " → unset";
          }
        }
        return Failure{kExitBadSpec, "preprocess.output: the cache in " + out_ +
                                         " was made with other settings or model files (" + diff +
                                         "); use a new preprocess.output or delete the old cache"};
      }
    } else if (o_.rank == 0) {
      std::ofstream(settings_path.string() + ".tmp") << settings_.dump(2) << "\n";
      std::error_code ec;
      fs::rename(settings_path.string() + ".tmp", settings_path, ec);
      if (ec) return Failure{kExitStorageError, settings_path.string() + ": " + ec.message()};
    }
    // Shards left by other settings (a settings.json deleted by hand) are refused too.
    for (int64_t s = 0; s < num_shards_; ++s) {
      for (size_t b = 0; b < buckets_.size(); ++b) {
        if (auto f = CheckWrittenShard(b, s)) return f;
      }
    }
    return std::nullopt;
  }

  // A shard file an earlier attempt wrote: readable, of these settings; counted when it is this
  // rank's.
  std::optional<Failure> CheckWrittenShard(size_t bucket, int64_t s) {
    const auto path = ShardPath(bucket, s);
    if (!fs::exists(path)) return std::nullopt;
    auto file = SafetensorsFile::Open(path);
    if (!file.ok()) {
      // A shard is renamed into place complete: a broken one was damaged afterwards.
      return Failure{kExitDataError,
                     "preprocess.output: " + file.status().ToString() + " (delete it and resume)"};
    }
    auto it = (*file)->metadata().find("settings_hash");
    if (it == (*file)->metadata().end() || it->second != settings_hash_) {
      return Failure{kExitBadSpec, "preprocess.output: " + path +
                                       " was made with other settings; use a new "
                                       "preprocess.output or delete the old cache"};
    }
    // A shard some of whose bucket files are missing is encoded again, and counted then.
    if (s % o_.world_size == o_.rank && ShardDone(s)) CountWrittenShard(**file);
    return std::nullopt;
  }

  // Adds the clips and skips a shard of this rank written by an earlier attempt recorded (its
  // `video_ids` and `skipped` metadata), so the counts a rank reports cover the whole job.
  void CountWrittenShard(const SafetensorsFile& file) {
    if (auto ids = file.metadata().find("video_ids"); ids != file.metadata().end()) {
      const Json written = Json::parse(ids->second, nullptr, /*allow_exceptions=*/false);
      if (written.is_array()) clips_written_ += static_cast<int64_t>(written.size());
    }
    auto it = file.metadata().find("skipped");
    if (it == file.metadata().end()) return;
    const Json skipped = Json::parse(it->second, nullptr, /*allow_exceptions=*/false);
    if (!skipped.is_array()) return;
    for (const Json& s : skipped) {
      if (s.is_object() && s.contains("reason") && s["reason"].is_string()) {
        ++skipped_by_reason_[s["reason"].get<std::string>()];
      }
    }
  }

  // The skip counts so far, by reason, as a metric point carries them.
  void SetSkipCounts(StepReport* r) const {
    ForEachVideoSkipCount(*r, [&](const char* reason, int64_t& n) {
      auto it = skipped_by_reason_.find(reason);
      n = it == skipped_by_reason_.end() ? 0 : it->second;
    });
  }

  // The cache directory of bucket `b`: the output itself without preprocess.buckets.
  std::string BucketDir(size_t b) const {
    if (!bucketed_) return out_;
    const PreprocessBucket& k = buckets_[b];
    return (fs::path(out_) / CacheBucketDir(k.width, k.height, k.frames)).string();
  }

  std::string ShardPath(size_t bucket, int64_t shard) const {
    return (fs::path(BucketDir(bucket)) / CacheShardName(shard)).string();
  }

  // Every bucket's file of the shard exists.
  bool ShardDone(int64_t shard) const {
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (!fs::exists(ShardPath(b, shard))) return false;
    }
    return true;
  }

  DecodedClip DecodeOne(int64_t row) const {
    const auto& e = entries_[static_cast<size_t>(row)];
    const auto& d = spec_.data;
    DecodedClip clip;
    clip.row = row;
    clip.video_id = e.video_id;
    clip.caption = e.caption;
    VideoReaderOptions options;
    options.threads = 1;
    options.min_frames = spec_.preprocess.min_frames;
    auto reader = VideoReader::Open(e.path, options);
    if (!reader.ok()) {
      clip.skip_reason = VideoErrorName(reader.error());
      clip.skip_detail = ShortMessage(reader.status());
      return clip;
    }
    // A damaged file is skipped whichever frames the seed would pick.
    if (auto whole = reader->CheckComplete(); !whole.ok()) {
      clip.skip_reason = VideoErrorName(whole.error());
      clip.skip_detail = ShortMessage(whole.status());
      return clip;
    }
    const int64_t length = reader->info().num_frames;
    clip.bucket = NearestAspectBucket(reader->info().width, reader->info().height, buckets_);
    const PreprocessBucket& bucket = buckets_[static_cast<size_t>(clip.bucket)];
    const int frames = static_cast<int>(bucket.frames);
    // The windows depend only on the seed, the row and the window: any rank split gives the same
    // clips (window 0 is the clip of a one-window cache).
    const auto& p = spec_.preprocess;
    for (int64_t start :
         WindowStarts(length, frames, static_cast<int>(d.stride), p.windows_per_video,
                      p.window_placement == WindowPlacement::kUniform, d.seed, row)) {
      auto indices = SampleFrameIndices(length, frames, static_cast<int>(d.stride), start);
      if (!indices.ok()) {
        clip.skip_reason = "unreadable";
        clip.skip_detail = ShortMessage(indices.status());
        clip.windows.clear();
        return clip;
      }
      auto frames = reader->ReadFrames(*indices);
      if (!frames.ok()) {
        clip.skip_reason = VideoErrorName(frames.error());
        clip.skip_detail = ShortMessage(frames.status());
        clip.windows.clear();
        return clip;
      }
      auto& f = *frames;
      auto u8 = torch::from_blob(f.data.data(), {f.num_frames, f.height, f.width, 3}, torch::kByte);
      clip.windows.push_back(PrepareFrames(u8, bucket.height, bucket.width));
      clip.frames.push_back(std::move(*indices));
    }
    return clip;
  }

  // Decodes a shard's rows on `decode_threads` threads.
  std::vector<DecodedClip> DecodeShard(int64_t shard) const {
    const int64_t first = shard * shard_size_;
    const int64_t n = std::min<int64_t>(shard_size_, static_cast<int64_t>(entries_.size()) - first);
    std::vector<DecodedClip> clips(static_cast<size_t>(n));
    std::atomic<int64_t> next{0};
    auto work = [&] {
      for (int64_t i = next++; i < n; i = next++)
        clips[static_cast<size_t>(i)] = DecodeOne(first + i);
    };
    std::vector<std::thread> threads;
    const int64_t count = std::min<int64_t>(spec_.preprocess.decode_threads, n);
    for (int64_t t = 1; t < count; ++t) threads.emplace_back(work);
    work();
    for (auto& t : threads) t.join();
    return clips;
  }

  torch::Tensor EncodeText(const std::vector<std::string>& captions) {
    return EncodeCaptions(*text_encoder_, *tokenizer_, captions);
  }

  // Rank 0: the empty caption's text state, in every bucket's cache.
  std::optional<Failure> WriteEmptyCaption() {
    if (o_.rank != 0) return std::nullopt;
    torch::Tensor state;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const fs::path path = fs::path(BucketDir(b)) / kEmptyCaptionFile;
      if (fs::exists(path)) continue;
      if (!state.defined()) state = EncodeText({""})[0].to(torch::kCPU, store_dtype_);
      auto st = WriteShardAtomically(path.string(), {{"text_state", state}},
                                     {{"format", "pt"}, {"settings_hash", settings_hash_}});
      if (!st.ok()) return Failure{kExitCrash, st.ToString()};
    }
    return std::nullopt;
  }

  // Encodes a decoded shard and writes each bucket's file of it; returns the clips written.
  Result<int64_t> EncodeAndWrite(int64_t shard, const std::vector<DecodedClip>& clips) {
    Json skipped = Json::array();
    for (const auto& c : clips) {
      if (!c.skipped()) continue;
      skipped.push_back(
          {{"video_id", c.video_id}, {"reason", c.skip_reason}, {"detail", c.skip_detail}});
      ++skipped_by_reason_[c.skip_reason];
      if (skip_events_++ < 20) {
        reporter_.OnEvent(EventLevel::kWarning, "skipped video " + c.video_id + " (" +
                                                    c.skip_reason + "): " + c.skip_detail);
      }
    }
    int64_t written = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      // The shard's skipped videos are recorded once, in the first bucket's file.
      auto n = EncodeAndWriteBucket(shard, b, clips, b == 0 ? skipped : Json::array());
      if (!n.ok()) return n.status();
      written += *n;
    }
    return written;
  }

  // The clips of the shard that went to `bucket`, encoded and written as its shard file.
  Result<int64_t> EncodeAndWriteBucket(int64_t shard, size_t bucket,
                                       const std::vector<DecodedClip>& clips, const Json& skipped) {
    Json ids = Json::array(), captions = Json::array();
    Json windows = Json::array(), frames = Json::array();
    std::vector<torch::Tensor> means, stds, flip_means, flip_stds;
    std::vector<std::string> texts;
    // [F, C, h, w] → [C, F, h, w], the UNet's clip layout.
    const auto encode = [&](const torch::Tensor& pixels, std::vector<torch::Tensor>* mean_out,
                            std::vector<torch::Tensor>* std_out) {
      auto dist =
          vae_->EncodeChunked(pixels.to(device_, compute_dtype_), spec_.preprocess.vae_chunk);
      mean_out->push_back(dist.mean.permute({1, 0, 2, 3}).to(torch::kCPU, store_dtype_));
      std_out->push_back(torch::exp(0.5 * dist.logvar.to(torch::kFloat))
                             .permute({1, 0, 2, 3})
                             .to(torch::kCPU, store_dtype_));
    };
    for (const auto& c : clips) {
      if (c.skipped() || static_cast<size_t>(c.bucket) != bucket) continue;
      for (size_t w = 0; w < c.windows.size(); ++w) {
        encode(c.windows[w], &means, &stds);
        // The VAE is not flip-equivariant: the flipped clip is encoded from flipped pixels.
        if (spec_.preprocess.flip) encode(torch::flip(c.windows[w], {3}), &flip_means, &flip_stds);
        ids.push_back(c.video_id);
        captions.push_back(c.caption);
        texts.push_back(c.caption);
        windows.push_back(static_cast<int64_t>(w));
        frames.push_back(c.frames[w]);
      }
    }
    TensorMap tensors;
    if (!means.empty()) {
      tensors["latent_mean"] = torch::stack(means);
      tensors["latent_std"] = torch::stack(stds);
      if (spec_.preprocess.flip) {
        tensors["latent_mean_flip"] = torch::stack(flip_means);
        tensors["latent_std_flip"] = torch::stack(flip_stds);
      }
      tensors["text_states"] = EncodeText(texts).to(torch::kCPU, store_dtype_);
    }
    ADCTL_RETURN_IF_ERROR(WriteShardAtomically(ShardPath(bucket, shard), tensors,
                                               {{"format", "pt"},
                                                {"settings_hash", settings_hash_},
                                                {"video_ids", ids.dump()},
                                                {"captions", captions.dump()},
                                                {"windows", windows.dump()},
                                                {"frames", frames.dump()},
                                                {"skipped", skipped.dump()}}));
    return static_cast<int64_t>(means.size());
  }

  std::optional<Failure> Run() {
    torch::NoGradGuard no_grad;
    if (auto f = WriteEmptyCaption()) return f;
    std::vector<int64_t> todo;
    int64_t mine = 0, done = 0;
    for (int64_t s = o_.rank; s < num_shards_; s += o_.world_size) {
      ++mine;
      if (ShardDone(s)) {
        ++done;  // its skips were counted by CheckExistingCache
      } else {
        todo.push_back(s);
      }
    }
    if (o_.stop_watched != nullptr) o_.stop_watched->store(true);
    reporter_.OnTrainingStarted(done, mine);
    if (done > 0) {
      reporter_.OnEvent(EventLevel::kInfo, "preprocess: resuming; " + std::to_string(done) +
                                               " of this rank's " + std::to_string(mine) +
                                               " shards are already written");
      StepReport r;  // where the rank stands, clips and skips of the earlier attempts included
      r.step = done;
      r.total_steps = mine;
      r.samples_seen = clips_written_;
      r.time = NowSeconds();
      SetSkipCounts(&r);
      reporter_.OnStep(r);
    }
    std::future<std::vector<DecodedClip>> next;
    if (!todo.empty())
      next = std::async(std::launch::async, [&, s = todo[0]] { return DecodeShard(s); });
    for (size_t k = 0; k < todo.size(); ++k) {
      if (StopRequested()) {
        if (next.valid()) next.wait();
        reporter_.OnEvent(EventLevel::kInfo, "preprocess: stopped; " + std::to_string(done) +
                                                 " shards written, the rest on resume");
        return Failure{kExitStopped, "preprocess: stop requested"};
      }
      const auto t0 = SteadyClock::now();
      auto clips = next.get();
      const double wait = std::chrono::duration<double>(SteadyClock::now() - t0).count();
      if (k + 1 < todo.size()) {
        next = std::async(std::launch::async, [&, s = todo[k + 1]] { return DecodeShard(s); });
      }
      auto written = EncodeAndWrite(todo[k], clips);
      if (!written.ok()) return Failure{kExitCrash, written.status().ToString()};
      clips_written_ += *written;
      ++done;
      StepReport r;
      r.step = done;
      r.total_steps = mine;
      r.step_seconds = std::chrono::duration<double>(SteadyClock::now() - t0).count();
      r.data_wait_seconds = wait;
      // A preprocess point's clips_per_second counts the shard's videos, cached or skipped
      // (videos/s of all ranks); samples_seen the rank's clips written, every attempt.
      const int64_t videos = std::min<int64_t>(
          shard_size_, static_cast<int64_t>(entries_.size()) - todo[k] * shard_size_);
      r.clips_per_second =
          r.step_seconds > 0 ? static_cast<double>(videos) * o_.world_size / r.step_seconds : 0;
      r.samples_seen = clips_written_;
      r.time = NowSeconds();
      SetSkipCounts(&r);
      reporter_.OnStep(r);
    }
    if (!skipped_by_reason_.empty()) {
      std::string summary;
      int64_t total = 0;
      for (const auto& [reason, n] : skipped_by_reason_) {
        summary += (summary.empty() ? "" : ", ") + reason + " " + std::to_string(n);
        total += n;
      }
      reporter_.OnEvent(EventLevel::kWarning, "preprocess: rank " + std::to_string(o_.rank) +
                                                  " skipped " + std::to_string(total) +
                                                  " videos (" + summary + ")");
    }
    if (o_.rank != 0) return std::nullopt;
    return WriteIndex();
  }

  bool StopRequested() {
    return (o_.stop_flag != nullptr && o_.stop_flag->load()) || reporter_.StopRequested();
  }

  // Rank 0, after its own shards: waits for every shard, then writes index.json (each bucket's,
  // then the bucketed cache's own).
  std::optional<Failure> WriteIndex() {
    for (;;) {
      int64_t missing = 0;
      for (int64_t s = 0; s < num_shards_; ++s) missing += !ShardDone(s);
      if (missing == 0) break;
      if (StopRequested()) return Failure{kExitStopped, "preprocess: stop requested"};
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    LatentCacheIndex empty;
    empty.settings = settings_;
    empty.settings_hash = settings_hash_;
    empty.scaling_factor = scaling_factor_;
    LatentCacheIndex top = empty;
    std::string per_bucket;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      LatentCacheIndex index = empty;
      for (int64_t s = 0; s < num_shards_; ++s) {
        const std::string path = ShardPath(b, s);
        auto file = SafetensorsFile::Open(path);
        if (!file.ok()) return Failure{kExitDataError, file.status().ToString()};
        const auto& meta = (*file)->metadata();
        int64_t clips = 0;
        try {
          clips = static_cast<int64_t>(Json::parse(meta.at("video_ids")).size());
          for (const auto& skip : Json::parse(meta.at("skipped"))) {
            ++index.skipped[skip.at("reason").get<std::string>()];
            ++index.skipped_total;
          }
        } catch (const std::exception& e) {
          return Failure{kExitDataError, path + ": bad shard metadata: " + e.what()};
        }
        index.shards.push_back({CacheShardName(s), clips});
        index.clips += clips;
      }
      if (!bucketed_) {
        top = std::move(index);
        break;
      }
      auto st = WriteLatentCacheIndex(BucketDir(b), index);
      if (!st.ok()) return Failure{kExitCrash, st.ToString()};
      const PreprocessBucket& k = buckets_[b];
      top.buckets.push_back(
          {CacheBucketDir(k.width, k.height, k.frames), k.width, k.height, k.frames, index.clips});
      top.clips += index.clips;
      for (const auto& [reason, n] : index.skipped) top.skipped[reason] += n;
      top.skipped_total += index.skipped_total;
      per_bucket += std::string(per_bucket.empty() ? "" : ", ") + std::to_string(index.clips) +
                    " of " + std::to_string(k.frames) + "x" + std::to_string(k.height) + "x" +
                    std::to_string(k.width);
    }
    auto st = WriteLatentCacheIndex(out_, top);
    if (!st.ok()) return Failure{kExitCrash, st.ToString()};
    std::string skipped;
    for (const auto& [reason, n] : top.skipped) {
      skipped += (skipped.empty() ? "" : ", ") + reason + " " + std::to_string(n);
    }
    const std::string summary =
        std::to_string(top.clips) + " clips in " + std::to_string(num_shards_) + " shards" +
        (per_bucket.empty() ? "" : " (frames x height x width: " + per_bucket + ")") + ", " +
        std::to_string(top.skipped_total) + " videos skipped" +
        (skipped.empty() ? "" : " (" + skipped + ")");
    if (top.clips == 0) {
      return Failure{kExitDataError, "preprocess: no usable clip in the dataset: " + summary};
    }
    reporter_.OnEvent(EventLevel::kInfo, "preprocess: cache complete: " + summary + " in " + out_);
    return std::nullopt;
  }

  const TrainerOptions& o_;
  const JobSpec& spec_;
  Reporter& reporter_;
  const std::string out_;
  std::vector<VideoEntry> entries_;
  int64_t shard_size_ = 1, num_shards_ = 0;
  // preprocess.buckets, or the one shape data.sample_width × sample_height × frames.
  std::vector<PreprocessBucket> buckets_;
  bool bucketed_ = false;
  Json settings_;
  std::string settings_hash_;
  double scaling_factor_ = 0.18215;
  torch::Device device_{torch::kCPU};
  torch::ScalarType compute_dtype_ = torch::kFloat, store_dtype_ = torch::kBFloat16;
  std::optional<ClipTokenizer> tokenizer_;
  ClipTextModel text_encoder_{nullptr};
  AutoencoderKL vae_{nullptr};
  std::map<std::string, int64_t> skipped_by_reason_;
  int64_t clips_written_ = 0;  // by this rank, every attempt
  int64_t skip_events_ = 0;
};

}  // namespace

int RunPreprocess(const TrainerOptions& options) { return Preprocess(options).Execute(); }

}  // namespace adctl
