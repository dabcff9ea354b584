#include "worker/data/latent_dataset.h"

#include <algorithm>
#include <filesystem>

#include "worker/data/latent_cache.h"
#include "worker/data/sources.h"
#include "worker/model/weights.h"

namespace adctl {
namespace fs = std::filesystem;

std::string LatentShape::ToString() const {
  return "latents [" + std::to_string(channels) + ", " + std::to_string(frames) + ", " +
         std::to_string(height) + ", " + std::to_string(width) + "], text [" +
         std::to_string(text_len) + ", " + std::to_string(text_dim) + "]";
}

std::vector<int> ClipBuckets(const LatentDataset& dataset) {
  std::vector<int> buckets;
  buckets.reserve(static_cast<size_t>(dataset.size()));
  for (int64_t i = 0; i < dataset.size(); ++i) buckets.push_back(dataset.bucket(i));
  return buckets;
}

std::string BucketName(const LatentShape& shape) {
  return std::to_string(shape.frames) + "x" + std::to_string(shape.height) + "x" +
         std::to_string(shape.width);
}

namespace {

class SyntheticDataset : public LatentDataset {
 public:
  SyntheticDataset(const DataSpec& spec, int64_t channels, int64_t text_dim)
      : size_(spec.num_samples), seed_(spec.seed) {
    shape_ = {channels, spec.frames, spec.height, spec.width, spec.text_len, text_dim};
  }
  int64_t size() const override { return size_; }
  const LatentShape& shape() const override { return shape_; }

  LatentSample Get(int64_t index) const override {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed_) * 1000003ULL +
                                              static_cast<uint64_t>(index));
    auto field = torch::randn({shape_.channels, shape_.height, shape_.width}, gen);
    // Direction of motion: one of 4, one pixel per frame.
    const int64_t dir = torch::randint(0, 4, {1}, gen).item<int64_t>();
    const int64_t dy = dir == 0 ? 1 : dir == 1 ? -1 : 0;
    const int64_t dx = dir == 2 ? 1 : dir == 3 ? -1 : 0;
    std::vector<torch::Tensor> frames;
    for (int64_t f = 0; f < shape_.frames; ++f) {
      frames.push_back(torch::roll(field, {f * dy, f * dx}, {1, 2}));
    }
    LatentSample s;
    s.latents = torch::stack(frames, 1);  // [C, F, h, w]
    s.text = torch::randn({shape_.text_len, shape_.text_dim}, gen) * 0.1;
    s.text.select(1, dir % shape_.text_dim) += 1.0;
    return s;
  }

 private:
  int64_t size_;
  int64_t seed_;
  LatentShape shape_;
};

struct Shard {
  std::unique_ptr<SafetensorsFile> file;
  const TensorInfo* latents = nullptr;  // plain shards
  const TensorInfo* mean = nullptr;     // cache shards: latent_mean, latent_std
  const TensorInfo* std = nullptr;
  const TensorInfo* text = nullptr;
  // preprocess.flip: the flipped clips' statistics (latent_mean_flip, latent_std_flip).
  const TensorInfo* mean_flip = nullptr;
  const TensorInfo* std_flip = nullptr;
  int64_t first = 0, count = 0;
};

Result<torch::ScalarType> FloatType(const TensorInfo& info, const std::string& where) {
  switch (info.dtype) {
    case DType::kF32:
      return torch::kFloat;
    case DType::kBF16:
      return torch::kBFloat16;
    case DType::kF16:
      return torch::kHalf;
    default:
      return InvalidArgument(where + ": tensor '" + info.name + "' must be F32, BF16 or F16");
  }
}

// Row `row` of a [N, ...] tensor in the mapping, as an fp32 tensor.
torch::Tensor Row(const TensorInfo& info, int64_t row) {
  std::vector<int64_t> shape(info.shape.begin() + 1, info.shape.end());
  const size_t row_bytes = info.nbytes / static_cast<size_t>(info.shape[0]);
  const torch::ScalarType type = info.dtype == DType::kBF16  ? torch::kBFloat16
                                 : info.dtype == DType::kF16 ? torch::kHalf
                                                             : torch::kFloat;
  return torch::from_blob(const_cast<uint8_t*>(info.data) + row * row_bytes, shape, type)
      .to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

class ShardDataset : public LatentDataset {
 public:
  static Result<std::unique_ptr<LatentDataset>> Open(const std::string& dir, int64_t channels,
                                                     int64_t text_dim, const std::string& field) {
    if (!fs::is_directory(dir)) return NotFound(field + ": " + dir + " is not a directory");
    auto ds = std::make_unique<ShardDataset>();
    std::vector<std::string> paths;
    auto cache = ReadLatentCacheIndex(dir);
    if (cache.ok()) {
      ds->scaling_factor_ = cache->scaling_factor;
      for (const auto& shard : cache->shards) {
        if (shard.clips > 0) paths.push_back((fs::path(dir) / shard.file).string());
      }
      if (paths.empty()) {
        return InvalidArgument(field + ": the cache " + dir + " holds no clip (" +
                               std::to_string(cache->skipped_total) + " videos were skipped)");
      }
      auto empty = ReadTensorFile((fs::path(dir) / kEmptyCaptionFile).string());
      if (!empty.ok()) return empty.status();
      if (!empty->count("text_state")) {
        return InvalidArgument(dir + "/" + kEmptyCaptionFile + ": no tensor 'text_state'");
      }
      ds->empty_text_ = empty->at("text_state").to(torch::kFloat);
    } else if (cache.status().code() != StatusCode::kNotFound) {
      return cache.status();
    } else {
      if (fs::exists(fs::path(dir) / "shards")) {
        return FailedPrecondition(field + ": " + dir +
                                  " is an unfinished latent cache (no index.json): run or resume "
                                  "its preprocess job to the end first");
      }
      for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
      }
      std::sort(paths.begin(), paths.end());
      if (paths.empty()) return NotFound(field + ": no *.safetensors shards in " + dir);
    }
    for (const auto& p : paths) {
      auto file = SafetensorsFile::Open(p);
      if (!file.ok()) return file.status();
      Shard s;
      s.file = std::move(*file);
      s.latents = s.file->Find("latents");
      s.mean = s.file->Find("latent_mean");
      s.std = s.file->Find("latent_std");
      s.text = s.file->Find("text_states");
      s.mean_flip = s.file->Find("latent_mean_flip");
      s.std_flip = s.file->Find("latent_std_flip");
      const TensorInfo* lat = cache.ok() ? s.mean : s.latents;
      if (lat == nullptr || s.text == nullptr || (cache.ok() && s.std == nullptr)) {
        return InvalidArgument(p + (cache.ok() ? ": a cache shard needs tensors 'latent_mean', "
                                                 "'latent_std' and 'text_states'"
                                               : ": a latent shard needs tensors 'latents' and "
                                                 "'text_states'"));
      }
      for (const TensorInfo* info : {lat, s.std, s.text, s.mean_flip, s.std_flip}) {
        if (info != nullptr) ADCTL_RETURN_IF_ERROR(FloatType(*info, p).status());
      }
      if ((s.mean_flip == nullptr) != (s.std_flip == nullptr) ||
          (s.mean_flip != nullptr &&
           (s.mean_flip->shape != lat->shape || s.std_flip->shape != lat->shape || !cache.ok()))) {
        return InvalidArgument(p +
                               ": 'latent_mean_flip' and 'latent_std_flip' come together, "
                               "in a cache shard, shaped as 'latent_mean'");
      }
      const auto& ls = lat->shape;
      const auto& ts = s.text->shape;
      if (ls.size() != 5 || ts.size() != 3 || ls[0] != ts[0] ||
          (s.std != nullptr && cache.ok() && s.std->shape != ls)) {
        return InvalidArgument(p + ": expected latents [N, C, F, h, w] and text_states [N, L, D]");
      }
      LatentShape shape{ls[1], ls[2], ls[3], ls[4], ts[1], ts[2]};
      if (ds->shards_.empty()) {
        ds->shape_ = shape;
      } else if (shape.ToString() != ds->shape_.ToString()) {
        return InvalidArgument(p + ": shard has " + shape.ToString() + ", earlier shards " +
                               ds->shape_.ToString());
      }
      if (!cache.ok()) s.mean = nullptr;  // plain shards: `latents` only
      s.first = ds->size_;
      s.count = ls[0];
      ds->size_ += s.count;
      ds->shards_.push_back(std::move(s));
    }
    if (ds->shape_.channels != channels) {
      return InvalidArgument(field + ": latents have " + std::to_string(ds->shape_.channels) +
                             " channels, the model's in_channels is " + std::to_string(channels));
    }
    if (ds->shape_.text_dim != text_dim) {
      return InvalidArgument(field + ": text_states have width " +
                             std::to_string(ds->shape_.text_dim) +
                             ", the model's cross_attention_dim is " + std::to_string(text_dim));
    }
    if (ds->empty_text_.defined() &&
        ds->empty_text_.sizes() != torch::IntArrayRef({ds->shape_.text_len, text_dim})) {
      return InvalidArgument(dir + "/" + kEmptyCaptionFile + ": text_state does not match [" +
                             std::to_string(ds->shape_.text_len) + ", " + std::to_string(text_dim) +
                             "]");
    }
    return std::unique_ptr<LatentDataset>(std::move(ds));
  }

  int64_t size() const override { return size_; }
  const LatentShape& shape() const override { return shape_; }
  bool has_empty_caption() const override { return empty_text_.defined(); }

  LatentSample Get(int64_t index) const override {
    const Shard& s = Find(index);
    const int64_t row = index - s.first;
    if (s.mean == nullptr) return {Row(*s.latents, row), Row(*s.text, row)};
    return {Row(*s.mean, row) * scaling_factor_, Row(*s.text, row)};
  }

  LatentSample Draw(int64_t index, at::Generator& gen, double caption_dropout) const override {
    const Shard& s = Find(index);
    if (s.mean == nullptr) return Get(index);
    const int64_t row = index - s.first;
    // A cache with flipped clips: the draw takes one of the two, first from the generator.
    const bool flip = s.mean_flip != nullptr && torch::rand({1}, gen).item<double>() < 0.5;
    auto mean = Row(flip ? *s.mean_flip : *s.mean, row);
    auto latents =
        (mean + Row(flip ? *s.std_flip : *s.std, row) * torch::randn(mean.sizes(), gen)) *
        scaling_factor_;
    const bool drop = torch::rand({1}, gen).item<double>() < caption_dropout;
    return {latents, drop ? empty_text_.clone() : Row(*s.text, row)};
  }

 private:
  const Shard& Find(int64_t index) const {
    auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                               [](int64_t i, const Shard& s) { return i < s.first; });
    return *(it - 1);
  }

  std::vector<Shard> shards_;
  int64_t size_ = 0;
  LatentShape shape_;
  double scaling_factor_ = 1.0;
  torch::Tensor empty_text_;
};

// A cache of shape buckets (preprocess.buckets): each bucket's cache, one after another.
Result<std::unique_ptr<LatentDataset>> OpenBucketedCache(const std::string& dir,
                                                         const LatentCacheIndex& index,
                                                         int64_t channels, int64_t text_dim,
                                                         const std::string& field) {
  std::vector<std::shared_ptr<const LatentDataset>> parts;
  for (const CacheBucketEntry& b : index.buckets) {
    if (b.clips == 0) continue;  // no video had its aspect ratio
    const std::string bucket_dir = (fs::path(dir) / b.dir).string();
    auto bucket_index = ReadLatentCacheIndex(bucket_dir);
    if (!bucket_index.ok()) {
      return InvalidArgument(field + ": bucket " + b.dir + " of the cache " + dir + ": " +
                             bucket_index.status().message());
    }
    if (bucket_index->settings_hash != index.settings_hash) {
      return InvalidArgument(field + ": " + bucket_dir +
                             " was made with other settings than the cache it is in");
    }
    auto part = ShardDataset::Open(bucket_dir, channels, text_dim, field);
    if (!part.ok()) return part.status();
    parts.emplace_back(std::move(*part));
  }
  if (parts.empty()) {
    return InvalidArgument(field + ": the cache " + dir + " holds no clip (" +
                           std::to_string(index.skipped_total) + " videos were skipped)");
  }
  return std::unique_ptr<LatentDataset>(new ConcatDataset(std::move(parts)));
}

}  // namespace

Result<std::unique_ptr<LatentDataset>> OpenLatentDataset(const DataSpec& spec, int64_t channels,
                                                         int64_t text_dim,
                                                         const std::string& field) {
  if (spec.kind == DataKind::kSynthetic) {
    return std::unique_ptr<LatentDataset>(new SyntheticDataset(spec, channels, text_dim));
  }
  if (spec.kind == DataKind::kLatents) {
    auto cache = ReadLatentCacheIndex(spec.path);
    if (cache.ok() && !cache->buckets.empty()) {
      return OpenBucketedCache(spec.path, *cache, channels, text_dim, field);
    }
    return ShardDataset::Open(spec.path, channels, text_dim, field);
  }
  return InvalidArgument("data.kind: unknown kind '" + Name(spec.kind) + "' (synthetic, latents)");
}

Status WriteSyntheticShards(const DataSpec& spec, int64_t channels, int64_t text_dim,
                            const std::string& dir, int64_t shard_size) {
  SyntheticDataset source(spec, channels, text_dim);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal(dir + ": cannot create: " + ec.message());
  for (int64_t first = 0, shard = 0; first < source.size(); first += shard_size, ++shard) {
    const int64_t n = std::min(shard_size, source.size() - first);
    std::vector<torch::Tensor> latents, text;
    for (int64_t i = 0; i < n; ++i) {
      auto s = source.Get(first + i);
      latents.push_back(s.latents);
      text.push_back(s.text);
    }
    char name[48];
    std::snprintf(name, sizeof(name), "shard-%05lld.safetensors", static_cast<long long>(shard));
    ADCTL_RETURN_IF_ERROR(
        WriteTensorFile((fs::path(dir) / name).string(),
                        {{"latents", torch::stack(latents)}, {"text_states", torch::stack(text)}}));
  }
  return Status::Ok();
}

}  // namespace adctl
