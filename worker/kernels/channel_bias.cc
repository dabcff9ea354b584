// a + b + bias for [N, C, ...] maps (a ResNet's convolution bias, residual and time embedding):
// the autograd Function over the kernel of channel_bias.cu, and the dispatcher.
#include "worker/kernels/channel_bias.h"

#include <vector>

#include "worker/kernels/channel_bias_cuda.h"
#include "worker/kernels/channel_bias_internal.h"
#include "worker/kernels/dispatch.h"
#include "worker/kernels/dispatch_internal.h"

namespace adctl {

// ---- autograd Function ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// bias [C] or [R, C] as [R, C] for a [N, C, ...] map.
torch::Tensor BiasRows(const torch::Tensor& bias, const torch::Tensor& a) {
  return bias.reshape({bias.dim() == 2 ? bias.size(0) : 1, a.size(1)});
}

// bias [R, C] as a's per-sample channel bias [N, C, 1, ...] in a's dtype: sample i takes row
// i / (N / R).
torch::Tensor PerSampleBias(const torch::Tensor& bias, const torch::Tensor& a) {
  std::vector<int64_t> shape(static_cast<size_t>(a.dim()), 1);
  shape[0] = a.size(0);
  shape[1] = a.size(1);
  return bias.to(a.scalar_type()).repeat_interleave(a.size(0) / bias.size(0), 0).view(shape);
}

// a + b + bias for [N, C, ...] maps, bias [R, C] (sample i takes row i / (N / R)); b empty when
// there is none (autograd functions take defined tensors only). The kernel's one pass on CUDA
// tensors stored channels-last (the dispatcher's condition), the composition otherwise.
class AddChannelBiasFunction : public torch::autograd::Function<AddChannelBiasFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& bias) {
    const bool has_b = b.numel() > 0;
    ctx->saved_data["has_b"] = has_b;
    ctx->saved_data["bias_rows"] = bias.size(0);
    ctx->saved_data["bias_type"] = static_cast<int64_t>(bias.scalar_type());
    if (UseKernel(a) && IsChannelsLast(a) &&
        (!has_b || (b.strides() == a.strides() && b.scalar_type() == a.scalar_type()))) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(a.device());
      const int64_t n = a.size(0), c = a.size(1);
      auto out = torch::empty_like(a);
      const auto bias32 = bias.to(torch::kFloat).contiguous();
      Check(fused_cuda::AddChannelBias(KernelType(a), a.data_ptr(), has_b ? b.data_ptr() : nullptr,
                                       bias32.data_ptr<float>(), out.data_ptr(), n,
                                       a.numel() / (n * c), c, bias.size(0),
                                       c10::cuda::getCurrentCUDAStream().stream()),
            "channel bias kernel");
      return out;
#endif
    }
    return (has_b ? a + b : a) + PerSampleBias(bias, a);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = grads[0];
    const bool has_b = ctx->saved_data["has_b"].toBool();
    torch::Tensor dbias;
    if (ctx->needs_input_grad(2)) {
      // Σ over each sample's positions, then over the samples that share a row.
      const auto type = static_cast<torch::ScalarType>(ctx->saved_data["bias_type"].toInt());
      const int64_t rows = ctx->saved_data["bias_rows"].toInt();
      const auto per_sample = g.to(ComputeType(g)).flatten(2).sum(2);  // [N, C]
      dbias = per_sample.view({rows, -1, per_sample.size(1)}).sum(1).to(type);
    }
    return {ctx->needs_input_grad(0) ? g : torch::Tensor(),
            has_b && ctx->needs_input_grad(1) ? g : torch::Tensor(), dbias};
  }
};

}  // namespace

// ---- dispatchers ----

torch::Tensor FusedAddChannelBias(const torch::Tensor& a, const torch::Tensor& b,
                                  const torch::Tensor& bias) {
  const int64_t rows = bias.dim() == 2 ? bias.size(0) : 1;
  TORCH_CHECK(a.dim() >= 2 && bias.numel() == rows * a.size(1) && a.size(0) % rows == 0,
              "channel bias: ", bias.sizes(), " is not [C] or [R, C] with R dividing N for ",
              a.sizes());
  TORCH_CHECK(!b.defined() || b.sizes() == a.sizes(), "channel bias: ", b.sizes(), " added to ",
              a.sizes());
  const auto none = torch::empty({0}, a.options().requires_grad(false));
  return AddChannelBiasFunction::apply(a, b.defined() ? b : none, BiasRows(bias, a));
}

bool ChannelBiasKernelApplies(const torch::Tensor& a) {
  return FusedKernelsEnabled() && UseKernel(a) && IsChannelsLast(a);
}

torch::Tensor AddChannelBias(const torch::Tensor& a, const torch::Tensor& b,
                             const torch::Tensor& bias) {
  if (ChannelBiasKernelApplies(a) &&
      (!b.defined() || (b.sizes() == a.sizes() && b.strides() == a.strides() &&
                        b.scalar_type() == a.scalar_type() && b.device() == a.device()))) {
    return FusedAddChannelBias(a, b, bias);
  }
  return (b.defined() ? a + b : a) + PerSampleBias(BiasRows(bias, a), a);
}

}  // namespace adctl
