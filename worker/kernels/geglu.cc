// GEGLU, a · GELU(g) for h = [a, g]: the reference math, the autograd Function over the kernels
// of geglu.cu, and the dispatcher.
#include "worker/kernels/geglu.h"

#include <cmath>

#include "worker/kernels/dispatch.h"
#include "worker/kernels/dispatch_internal.h"
#include "worker/kernels/geglu_cuda.h"
#include "worker/kernels/geglu_internal.h"

namespace adctl {

// ---- CPU reference ----

namespace {

torch::Tensor GeluCdf(const torch::Tensor& g) { return 0.5 * (1 + torch::erf(g * M_SQRT1_2)); }

}  // namespace

namespace fused_reference {

torch::Tensor GegluForward(const torch::Tensor& h) {
  const auto type = ComputeType(h);
  auto parts = h.to(type).chunk(2, -1);
  return (parts[0] * torch::gelu(parts[1])).to(h.scalar_type());
}

torch::Tensor GegluBackward(const torch::Tensor& dout, const torch::Tensor& h) {
  const auto type = ComputeType(h);
  auto parts = h.to(type).chunk(2, -1);
  const auto &a = parts[0], &g = parts[1];
  auto d = dout.to(type);
  auto pdf = torch::exp(-0.5 * g * g) * (1.0 / std::sqrt(2.0 * M_PI));
  auto da = d * g * GeluCdf(g);
  auto dg = d * a * (GeluCdf(g) + g * pdf);
  return torch::cat({da, dg}, -1).to(h.scalar_type());
}

}  // namespace fused_reference

// ---- autograd Function ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class GegluFunction : public torch::autograd::Function<GegluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input) {
    auto h = input.contiguous();
    torch::Tensor out;
    if (UseKernel(h)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(h.device());
      auto sizes = h.sizes().vec();
      const int64_t e = sizes.back() / 2;
      sizes.back() = e;
      out = torch::empty(sizes, h.options());
      Check(
          fused_cuda::GegluForward(KernelType(h), h.data_ptr(), out.data_ptr(), h.numel() / (2 * e),
                                   e, c10::cuda::getCurrentCUDAStream().stream()),
          "GEGLU forward kernel");
#endif
    } else {
      out = fused_reference::GegluForward(h);
    }
    ctx->save_for_backward({h});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto h = ctx->get_saved_variables()[0];
    const auto dout = grads[0].contiguous();
    torch::Tensor dh;
    if (UseKernel(h)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(h.device());
      const auto d = dout.to(h.scalar_type());
      const int64_t e = h.size(-1) / 2;
      dh = torch::empty_like(h);
      Check(fused_cuda::GegluBackward(KernelType(h), d.data_ptr(), h.data_ptr(), dh.data_ptr(),
                                      h.numel() / (2 * e), e,
                                      c10::cuda::getCurrentCUDAStream().stream()),
            "GEGLU backward kernel");
#endif
    } else {
      dh = fused_reference::GegluBackward(dout, h);
    }
    return {dh};
  }
};

}  // namespace

// ---- dispatchers ----

torch::Tensor FusedGeglu(const torch::Tensor& h) {
  TORCH_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, "GEGLU: the last dimension (", h.size(-1),
              ") must be even");
  return GegluFunction::apply(h);
}

torch::Tensor Geglu(const torch::Tensor& h) {
  if (FusedKernelsEnabled() && UseKernel(h)) return FusedGeglu(h);
  auto parts = h.chunk(2, -1);
  return parts[0] * torch::gelu(parts[1]);
}

}  // namespace adctl
