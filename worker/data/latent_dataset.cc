#include "worker/data/latent_dataset.h"

#include <algorithm>
#include <filesystem>

#include "worker/model/weights.h"

namespace adctl {
namespace fs = std::filesystem;

std::string LatentShape::ToString() const {
  return "latents [" + std::to_string(channels) + ", " + std::to_string(frames) + ", " +
         std::to_string(height) + ", " + std::to_string(width) + "], text [" +
         std::to_string(text_len) + ", " + std::to_string(text_dim) + "]";
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
  const TensorInfo* latents = nullptr;
  const TensorInfo* text = nullptr;
  int64_t first = 0, count = 0;
};

class ShardDataset : public LatentDataset {
 public:
  static Result<std::unique_ptr<LatentDataset>> Open(const std::string& dir, int64_t channels,
                                                     int64_t text_dim) {
    if (!fs::is_directory(dir)) return NotFound("data.path: " + dir + " is not a directory");
    std::vector<std::string> paths;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
    }
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) return NotFound("data.path: no *.safetensors shards in " + dir);
    auto ds = std::make_unique<ShardDataset>();
    for (const auto& p : paths) {
      auto file = SafetensorsFile::Open(p);
      if (!file.ok()) return file.status();
      Shard s;
      s.file = std::move(*file);
      s.latents = s.file->Find("latents");
      s.text = s.file->Find("text_states");
      if (s.latents == nullptr || s.text == nullptr) {
        return InvalidArgument(p + ": a latent shard needs tensors 'latents' and 'text_states'");
      }
      if (s.latents->dtype != DType::kF32 || s.text->dtype != DType::kF32) {
        return InvalidArgument(p + ": 'latents' and 'text_states' must be F32");
      }
      const auto& ls = s.latents->shape;
      const auto& ts = s.text->shape;
      if (ls.size() != 5 || ts.size() != 3 || ls[0] != ts[0]) {
        return InvalidArgument(p + ": expected latents [N, C, F, h, w] and text_states [N, L, D]");
      }
      LatentShape shape{ls[1], ls[2], ls[3], ls[4], ts[1], ts[2]};
      if (ds->shards_.empty()) {
        ds->shape_ = shape;
      } else if (shape.ToString() != ds->shape_.ToString()) {
        return InvalidArgument(p + ": shard has " + shape.ToString() + ", earlier shards " +
                               ds->shape_.ToString());
      }
      s.first = ds->size_;
      s.count = ls[0];
      ds->size_ += s.count;
      ds->shards_.push_back(std::move(s));
    }
    if (ds->shape_.channels != channels) {
      return InvalidArgument("data.path: latents have " + std::to_string(ds->shape_.channels) +
                             " channels, the model's in_channels is " + std::to_string(channels));
    }
    if (ds->shape_.text_dim != text_dim) {
      return InvalidArgument("data.path: text_states have width " +
                             std::to_string(ds->shape_.text_dim) +
                             ", the model's cross_attention_dim is " + std::to_string(text_dim));
    }
    return std::unique_ptr<LatentDataset>(std::move(ds));
  }

  int64_t size() const override { return size_; }
  const LatentShape& shape() const override { return shape_; }

  LatentSample Get(int64_t index) const override {
    auto it = std::upper_bound(shards_.begin(), shards_.end(), index,
                               [](int64_t i, const Shard& s) { return i < s.first; });
    const Shard& s = *(it - 1);
    const int64_t row = index - s.first;
    auto slice = [row](const TensorInfo* info) {
      std::vector<int64_t> shape(info->shape.begin() + 1, info->shape.end());
      const size_t row_bytes = info->nbytes / static_cast<size_t>(info->shape[0]);
      return torch::from_blob(const_cast<uint8_t*>(info->data) + row * row_bytes, shape,
                              torch::kFloat)
          .clone();
    };
    return {slice(s.latents), slice(s.text)};
  }

 private:
  std::vector<Shard> shards_;
  int64_t size_ = 0;
  LatentShape shape_;
};

}  // namespace

Result<std::unique_ptr<LatentDataset>> OpenLatentDataset(const DataSpec& spec, int64_t channels,
                                                         int64_t text_dim) {
  if (spec.kind == "synthetic") {
    return std::unique_ptr<LatentDataset>(new SyntheticDataset(spec, channels, text_dim));
  }
  if (spec.kind == "latents") return ShardDataset::Open(spec.path, channels, text_dim);
  return InvalidArgument("data.kind: unknown kind '" + spec.kind + "' (synthetic, latents)");
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
