#include "worker/model/flops.h"

#include <utility>
#include <vector>

namespace adctl {

namespace {

// The UNet's ops in forward order, as MAC counts per clip.
class OpCounter {
 public:
  OpCounter(int64_t frames, int64_t text_tokens) : frames_(frames), text_(text_tokens) {}

  // A 2-D convolution run on every frame; `hw` = output pixels.
  void Conv(int64_t cin, int64_t cout, int64_t k, int64_t hw) {
    Add(static_cast<double>(cin) * cout * k * k * hw * frames_, Kind::kMatmul);
  }
  void Linear(int64_t in, int64_t out, double tokens, bool motion = false) {
    Add(static_cast<double>(in) * out * tokens, motion ? Kind::kMotionLinear : Kind::kMatmul);
  }
  void Attention(double queries, double keys, int64_t channels, double batches) {
    Add(2.0 * queries * keys * channels * batches, Kind::kAttention);
  }

  void ResNet(int64_t cin, int64_t cout, int64_t hw, int64_t temb) {
    Conv(cin, cout, 3, hw);
    Linear(temb, cout, static_cast<double>(frames_));
    Conv(cout, cout, 3, hw);
    if (cin != cout) Conv(cin, cout, 1, hw);
  }

  // Transformer2DModel with one BasicTransformerBlock: self-attention, cross-attention to the
  // text, GEGLU feed-forward; projections in and out.
  void SpatialTransformer(int64_t c, int64_t hw, int64_t cross_dim) {
    const double tokens = static_cast<double>(hw) * frames_;
    Linear(c, c, tokens);                              // proj_in
    for (int i = 0; i < 4; ++i) Linear(c, c, tokens);  // attn1 q, k, v, out
    Attention(static_cast<double>(hw), static_cast<double>(hw), c, static_cast<double>(frames_));
    Linear(c, c, tokens);  // attn2 q
    for (int i = 0; i < 2; ++i) Linear(cross_dim, c, static_cast<double>(text_) * frames_);
    Attention(static_cast<double>(hw), static_cast<double>(text_), c, static_cast<double>(frames_));
    Linear(c, c, tokens);      // attn2 out
    Linear(c, 8 * c, tokens);  // GEGLU in (value and gate)
    Linear(4 * c, c, tokens);  // ff out
    Linear(c, c, tokens);      // proj_out
  }

  // A motion module: attention over the frames of each pixel (two self-attention blocks per
  // transformer layer, GEGLU feed-forward).
  void MotionModule(int64_t c, int64_t hw, int64_t layers) {
    seen_motion_ = true;
    in_motion_ = true;
    const double tokens = static_cast<double>(hw) * frames_;
    Linear(c, c, tokens, true);  // proj_in
    for (int64_t l = 0; l < layers; ++l) {
      for (int block = 0; block < 2; ++block) {
        for (int i = 0; i < 4; ++i) Linear(c, c, tokens, true);
        Attention(static_cast<double>(frames_), static_cast<double>(frames_), c,
                  static_cast<double>(hw));
      }
      Linear(c, 8 * c, tokens, true);
      Linear(4 * c, c, tokens, true);
    }
    Linear(c, c, tokens, true);  // proj_out
    in_motion_ = false;
  }

  TrainingFlops Result() const { return flops_; }

 private:
  enum class Kind { kMatmul, kAttention, kMotionLinear };

  void Add(double macs, Kind kind) {
    flops_.forward_macs += macs;
    if (kind == Kind::kMotionLinear) {
      flops_.motion_forward_macs += macs;
      flops_.backward_weight_macs += macs;
    }
    // Motion attention cores belong to the motion modules too.
    if (kind == Kind::kAttention && in_motion_) flops_.motion_forward_macs += macs;
    if (seen_motion_) flops_.backward_input_macs += kind == Kind::kAttention ? 2 * macs : macs;
  }

  const int64_t frames_, text_;
  bool seen_motion_ = false;
  bool in_motion_ = false;
  TrainingFlops flops_;
};

}  // namespace

TrainingFlops CountTrainingFlops(const UNetConfig& u, const MotionConfig& m, int64_t frames,
                                 int64_t latent_height, int64_t latent_width, int64_t text_tokens) {
  OpCounter ops(frames, text_tokens);
  const auto& ch = u.block_out_channels;
  const size_t levels = ch.size();
  const int64_t temb = u.time_embed_dim();
  int64_t h = latent_height, w = latent_width;

  ops.Conv(u.in_channels, ch[0], 3, h * w);  // conv_in
  ops.Linear(ch[0], temb, static_cast<double>(frames));
  ops.Linear(temb, temb, static_cast<double>(frames));
  std::vector<int64_t> skips = {ch[0]};
  int64_t prev = ch[0];
  for (size_t i = 0; i < levels; ++i) {
    for (int64_t j = 0; j < u.layers_per_block; ++j) {
      ops.ResNet(prev, ch[i], h * w, temb);
      prev = ch[i];
      if (u.HasCrossAttention(i, false))
        ops.SpatialTransformer(ch[i], h * w, u.cross_attention_dim);
      ops.MotionModule(ch[i], h * w, m.transformer_layers_per_block);
      skips.push_back(ch[i]);
    }
    if (i + 1 < levels) {
      h = (h + 1) / 2;
      w = (w + 1) / 2;
      ops.Conv(ch[i], ch[i], 3, h * w);  // downsample, stride 2
      skips.push_back(ch[i]);
    }
  }
  if (u.has_mid_block) {
    const int64_t c = ch.back();
    ops.ResNet(c, c, h * w, temb);
    ops.SpatialTransformer(c, h * w, u.cross_attention_dim);
    if (m.use_mid_block) ops.MotionModule(c, h * w, m.transformer_layers_per_block);
    ops.ResNet(c, c, h * w, temb);
  }
  for (size_t r = 0; r < levels; ++r) {
    const size_t i = levels - 1 - r;  // channels of this up level
    for (int64_t j = 0; j < u.layers_per_block + 1; ++j) {
      const int64_t skip = skips.back();
      skips.pop_back();
      ops.ResNet(prev + skip, ch[i], h * w, temb);
      prev = ch[i];
      if (u.HasCrossAttention(r, true)) ops.SpatialTransformer(ch[i], h * w, u.cross_attention_dim);
      ops.MotionModule(ch[i], h * w, m.transformer_layers_per_block);
    }
    if (r + 1 < levels) {
      h *= 2;
      w *= 2;
      ops.Conv(ch[i], ch[i], 3, h * w);  // upsample (nearest) + conv
    }
  }
  ops.Conv(ch[0], u.out_channels, 3, h * w);  // conv_out
  return ops.Result();
}

double DenseBf16PeakFlops(const std::string& name) {
  // NVIDIA's datasheets, dense (no 2:4 sparsity) bf16 tensor-core peaks.
  static const std::vector<std::pair<const char*, double>> kTable = {
      {"H200", 989e12},  {"H100", 989e12}, {"H800", 989e12}, {"GH200", 989e12},
      {"B200", 2250e12}, {"A100", 312e12}, {"A800", 312e12}, {"L40S", 362e12},
      {"L40", 181e12},   {"A10G", 70e12},  {"L4", 121e12},   {"A6000", 155e12},
  };
  for (const auto& [key, peak] : kTable) {
    if (name.find(key) != std::string::npos) return peak;
  }
  return 0;
}

}  // namespace adctl
