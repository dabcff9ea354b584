#include "worker/kernels/fused_ops.h"

#include <atomic>
#include <cmath>

#ifdef ADCTL_FUSED_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/kernels/fused_ops_cuda.h"
#endif

namespace adctl {

namespace {

std::atomic<bool> fused_enabled{true};

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::ScalarType ComputeType(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// Per-channel parameter shaped to broadcast over [N, C, ...].
torch::Tensor PerChannel(const torch::Tensor& p, const torch::Tensor& x, torch::ScalarType type) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return p.to(type).view(shape);
}

// x̂ = (x − mean) · rstd, in the compute type, x's shape.
torch::Tensor Normalized(const torch::Tensor& x, const torch::Tensor& mean,
                         const torch::Tensor& rstd, int64_t groups) {
  const auto type = ComputeType(x);
  auto xg = x.to(type).reshape({x.size(0), groups, -1});
  return ((xg - mean.to(type).unsqueeze(-1)) * rstd.to(type).unsqueeze(-1)).view(x.sizes());
}

torch::Tensor Affine(const torch::Tensor& xhat, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  auto z = xhat;
  if (weight.defined()) z = z * PerChannel(weight, xhat, xhat.scalar_type());
  if (bias.defined()) z = z + PerChannel(bias, xhat, xhat.scalar_type());
  return z;
}

// dL/dz from dL/dy for y = SiLU(z).
torch::Tensor SiluGrad(const torch::Tensor& dy, const torch::Tensor& z) {
  auto s = torch::sigmoid(z);
  return dy.to(z.scalar_type()) * s * (1 + z * (1 - s));
}

torch::Tensor GeluCdf(const torch::Tensor& g) { return 0.5 * (1 + torch::erf(g * M_SQRT1_2)); }

#ifdef ADCTL_FUSED_CUDA
fused_cuda::DType KernelType(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return fused_cuda::DType::kFloat32;
    case torch::kBFloat16:
      return fused_cuda::DType::kBFloat16;
    case torch::kHalf:
      return fused_cuda::DType::kFloat16;
    default:
      TORCH_CHECK(false, "fused kernels: no kernel for dtype ", t.scalar_type());
  }
}

bool UseKernel(const torch::Tensor& x) {
  return x.is_cuda() && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16 ||
                         x.scalar_type() == torch::kHalf);
}

void Check(int error, const char* what) {
  TORCH_CHECK(error == 0, what, ": ", fused_cuda::FusedCudaErrorString(error));
}

const void* PtrOrNull(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// γ and β as the kernels read them: x's dtype, contiguous, or undefined.
torch::Tensor KernelParam(const torch::Tensor& p, const torch::Tensor& x) {
  return p.defined() ? p.to(x.scalar_type()).contiguous() : p;
}
#else
bool UseKernel(const torch::Tensor&) { return false; }
#endif

class GroupNormSiluFunction : public torch::autograd::Function<GroupNormSiluFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               int64_t groups, double eps) {
    auto x = input.contiguous();
    torch::Tensor y, mean, rstd;
    if (UseKernel(x)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(x.device());
      const auto w = KernelParam(weight, x), b = KernelParam(bias, x);
      const int64_t n = x.size(0), c = x.size(1);
      y = torch::empty_like(x);
      mean = torch::empty({n, groups}, x.options().dtype(torch::kFloat));
      rstd = torch::empty_like(mean);
      Check(fused_cuda::GroupNormSiluForward(
                KernelType(x), x.data_ptr(), PtrOrNull(w), PtrOrNull(b), y.data_ptr(),
                mean.data_ptr<float>(), rstd.data_ptr<float>(), n, c, x.numel() / (n * c), groups,
                static_cast<float>(eps), c10::cuda::getCurrentCUDAStream().stream()),
            "GroupNorm+SiLU forward kernel");
#endif
    } else {
      auto r = fused_reference::GroupNormSiluForward(x, groups, weight, bias, eps);
      y = r.y;
      mean = r.mean;
      rstd = r.rstd;
    }
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    ctx->saved_data["groups"] = groups;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3],
               &rstd = saved[4];
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const auto dy = grads[0].contiguous();
    torch::Tensor dx;
    if (UseKernel(x)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(x.device());
      const auto w = KernelParam(weight, x), b = KernelParam(bias, x);
      const auto dyx = dy.to(x.scalar_type());
      const int64_t n = x.size(0), c = x.size(1);
      dx = torch::empty_like(x);
      Check(fused_cuda::GroupNormSiluBackward(
                KernelType(x), dyx.data_ptr(), x.data_ptr(), mean.data_ptr<float>(),
                rstd.data_ptr<float>(), PtrOrNull(w), PtrOrNull(b), dx.data_ptr(), n, c,
                x.numel() / (n * c), groups, c10::cuda::getCurrentCUDAStream().stream()),
            "GroupNorm+SiLU backward kernel");
#endif
    } else {
      dx = fused_reference::GroupNormSiluBackward(dy, x, mean, rstd, weight, bias, groups);
    }
    torch::Tensor dweight, dbias;
    const bool weight_grad = weight.defined() && weight.requires_grad();
    const bool bias_grad = bias.defined() && bias.requires_grad();
    if (weight_grad || bias_grad) {  // frozen in AnimateDiff's UNet; LibTorch operations here
      auto [dw, db] =
          fused_reference::GroupNormSiluAffineBackward(dy, x, mean, rstd, weight, bias, groups);
      if (weight_grad) dweight = dw.to(weight.scalar_type());
      if (bias_grad) dbias = db.to(bias.scalar_type());
    }
    return {dx, dweight, dbias, torch::Tensor(), torch::Tensor()};
  }
};

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

bool FusedKernelsBuilt() {
#ifdef ADCTL_FUSED_CUDA
  return true;
#else
  return false;
#endif
}

void SetFusedKernels(bool on) { fused_enabled.store(on); }
bool FusedKernelsEnabled() { return fused_enabled.load(); }

torch::Tensor FusedGroupNormSilu(const torch::Tensor& x, int64_t groups,
                                 const torch::Tensor& weight, const torch::Tensor& bias,
                                 double eps) {
  TORCH_CHECK(x.dim() >= 2 && x.size(1) % groups == 0, "GroupNorm+SiLU: ", x.size(1),
              " channels do not split into ", groups, " groups");
  // Without affine parameters: γ = 1, β = 0 (autograd functions take defined tensors only).
  const auto o = x.options().requires_grad(false);
  return GroupNormSiluFunction::apply(x, weight.defined() ? weight : torch::ones({x.size(1)}, o),
                                      bias.defined() ? bias : torch::zeros({x.size(1)}, o), groups,
                                      eps);
}

torch::Tensor FusedGeglu(const torch::Tensor& h) {
  TORCH_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, "GEGLU: the last dimension (", h.size(-1),
              ") must be even");
  return GegluFunction::apply(h);
}

torch::Tensor GroupNormSilu(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                            const torch::Tensor& bias, double eps) {
  if (FusedKernelsEnabled() && UseKernel(x))
    return FusedGroupNormSilu(x, groups, weight, bias, eps);
  return torch::silu(torch::group_norm(x, groups, weight, bias, eps));
}

torch::Tensor Geglu(const torch::Tensor& h) {
  if (FusedKernelsEnabled() && UseKernel(h)) return FusedGeglu(h);
  auto parts = h.chunk(2, -1);
  return parts[0] * torch::gelu(parts[1]);
}

namespace fused_reference {

GroupNormSiluResult GroupNormSiluForward(const torch::Tensor& x, int64_t groups,
                                         const torch::Tensor& weight, const torch::Tensor& bias,
                                         double eps) {
  const auto type = ComputeType(x);
  auto xg = x.to(type).reshape({x.size(0), groups, -1});
  auto mean = xg.mean(-1);
  auto var = (xg - mean.unsqueeze(-1)).pow(2).mean(-1);
  auto rstd = (var + eps).rsqrt();
  auto z = Affine(Normalized(x, mean, rstd, groups), weight, bias);
  return {torch::silu(z).to(x.scalar_type()), mean, rstd};
}

torch::Tensor GroupNormSiluBackward(const torch::Tensor& dy, const torch::Tensor& x,
                                    const torch::Tensor& mean, const torch::Tensor& rstd,
                                    const torch::Tensor& weight, const torch::Tensor& bias,
                                    int64_t groups) {
  const auto type = ComputeType(x);
  auto xhat = Normalized(x, mean, rstd, groups);
  auto g = SiluGrad(dy, Affine(xhat, weight, bias));
  if (weight.defined()) g = g * PerChannel(weight, x, type);
  auto gg = g.reshape({x.size(0), groups, -1});
  auto xg = xhat.reshape({x.size(0), groups, -1});
  auto dx = rstd.to(type).unsqueeze(-1) *
            (gg - gg.mean(-1, /*keepdim=*/true) - xg * (gg * xg).mean(-1, /*keepdim=*/true));
  return dx.view(x.sizes()).to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> GroupNormSiluAffineBackward(
    const torch::Tensor& dy, const torch::Tensor& x, const torch::Tensor& mean,
    const torch::Tensor& rstd, const torch::Tensor& weight, const torch::Tensor& bias,
    int64_t groups) {
  auto xhat = Normalized(x, mean, rstd, groups);
  auto dz = SiluGrad(dy, Affine(xhat, weight, bias));
  std::vector<int64_t> reduce = {0};
  for (int64_t d = 2; d < x.dim(); ++d) reduce.push_back(d);
  return {(dz * xhat).sum(reduce), dz.sum(reduce)};
}

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
}  // namespace adctl
