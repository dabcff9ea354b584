#include "worker/train/attention_warmup.h"

#include <torch/version.h>

#include <algorithm>
#include <optional>
#include <type_traits>

#if defined(ADCTL_WITH_CUDA)
#include <c10/cuda/CUDAGuard.h>
#endif

namespace adctl {

std::vector<AttentionShape> SpatialAttentionShapes(const UNetConfig& unet, int64_t clips,
                                                   int64_t frames, int64_t latent_height,
                                                   int64_t latent_width, int64_t text_len) {
  std::vector<AttentionShape> shapes;
  const auto add = [&](int64_t channels, int64_t heads, int64_t hw) {
    if (heads <= 0 || channels % heads != 0) return;
    const int64_t n = clips * frames, d = channels / heads;
    for (const AttentionShape s : {AttentionShape{n, heads, hw, hw, d, false, clips},
                                   AttentionShape{n, heads, hw, text_len, d, true, clips}}) {
      if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
    }
  };
  const auto& ch = unet.block_out_channels;
  const size_t levels = ch.size();
  if (levels == 0 || unet.attention_heads.size() < levels) return shapes;
  std::vector<int64_t> hw(levels);
  int64_t h = latent_height, w = latent_width;
  for (size_t i = 0; i < levels; ++i) {  // the downsamplers' (h + 1) / 2, as the model's
    hw[i] = h * w;
    h = (h + 1) / 2;
    w = (w + 1) / 2;
  }
  for (size_t i = 0; i < levels; ++i) {
    if (unet.HasCrossAttention(i, /*up=*/false)) add(ch[i], unet.attention_heads[i], hw[i]);
  }
  if (unet.has_mid_block) add(ch.back(), unet.attention_heads.back(), hw.back());
  for (size_t r = 0; r < levels; ++r) {
    const size_t i = levels - 1 - r;
    if (unet.HasCrossAttention(r, /*up=*/true)) add(ch[i], unet.attention_heads[i], hw[i]);
  }
  return shapes;
}

namespace {

#if defined(ADCTL_WITH_CUDA) && \
    (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5))
constexpr bool kCudnnAttention = true;

template <typename T>
int64_t AsInt(const T& v) {
  if constexpr (std::is_integral_v<T>) {
    return v;
  } else {
    return v.expect_int();
  }
}

// One forward and backward of cuDNN's attention in the model's layouts: q (and self-attention's
// k, v) as heads split out of [N, L, heads·d] projections, text k, v repeated over the frames.
void CompileAttention(const AttentionShape& s, torch::Device device, torch::ScalarType dtype) {
  const c10::cuda::CUDAGuard guard(device);
  const auto o = torch::TensorOptions().device(device).dtype(dtype);
  const int64_t inner = s.heads * s.head_dim;
  const auto split = [&](const torch::Tensor& t) {
    return t.view({t.size(0), t.size(1), s.heads, s.head_dim}).transpose(1, 2);
  };
  const auto q = split(torch::randn({s.batch, s.queries, inner}, o));
  torch::Tensor k, v;
  if (s.cross) {
    k = split(torch::randn({s.clips, s.keys, inner}, o)).repeat_interleave(s.batch / s.clips, 0);
    v = split(torch::randn({s.clips, s.keys, inner}, o)).repeat_interleave(s.batch / s.clips, 0);
  } else {
    k = split(torch::randn({s.batch, s.keys, inner}, o));
    v = split(torch::randn({s.batch, s.keys, inner}, o));
  }
  const auto f = at::_scaled_dot_product_cudnn_attention(q, k, v, std::optional<at::Tensor>(),
                                                         /*compute_log_sumexp=*/true);
  const auto dout = split(torch::randn({s.batch, s.queries, inner}, o));
  at::_scaled_dot_product_cudnn_attention_backward(
      dout, q, k, v, std::get<0>(f), std::get<1>(f), std::get<6>(f), std::get<7>(f), at::Tensor(),
      std::get<2>(f), std::get<3>(f), AsInt(std::get<4>(f)), AsInt(std::get<5>(f)),
      /*dropout_p=*/0.0, /*is_causal=*/false);
  torch::cuda::synchronize(device.index());
}
#else
constexpr bool kCudnnAttention = false;
void CompileAttention(const AttentionShape&, torch::Device, torch::ScalarType) {}
#endif

}  // namespace

AttentionWarmup::AttentionWarmup(std::vector<AttentionShape> shapes, torch::Device device,
                                 torch::ScalarType dtype, AttentionKernel attention) {
  if (!kCudnnAttention || !device.is_cuda() ||
      (attention != AttentionKernel::kAuto && attention != AttentionKernel::kCudnn) ||
      (dtype != torch::kBFloat16 && dtype != torch::kHalf)) {
    return;
  }
  ok_.assign(shapes.size(), 0);
  for (size_t i = 0; i < shapes.size(); ++i) {
    threads_.emplace_back([this, i, s = shapes[i], device, dtype] {
      try {
        CompileAttention(s, device, dtype);
        ok_[i] = 1;
      } catch (const std::exception&) {
        // Not a shape cuDNN takes: the model's attention picks another kernel for it.
      }
    });
  }
}

AttentionWarmup::~AttentionWarmup() { Wait(); }

int AttentionWarmup::Wait() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  return static_cast<int>(std::count(ok_.begin(), ok_.end(), 1));
}

}  // namespace adctl
