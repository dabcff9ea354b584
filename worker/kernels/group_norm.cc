// GroupNorm (+ SiLU, + a residual's pass-through) on [N, C, ...] maps, NCHW or channels-last: the
// reference math, the autograd Function over the kernels of group_norm.cu, and the dispatchers.
#include "worker/kernels/group_norm.h"

#include <tuple>

#include "worker/kernels/dispatch.h"
#include "worker/kernels/dispatch_internal.h"
#include "worker/kernels/group_norm_cuda.h"
#include "worker/kernels/group_norm_internal.h"

namespace adctl {

// ---- CPU reference ----

namespace {

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

}  // namespace

namespace fused_reference {

GroupNormSiluResult GroupNormSiluForward(const torch::Tensor& x, int64_t groups,
                                         const torch::Tensor& weight, const torch::Tensor& bias,
                                         double eps, bool silu) {
  const auto type = ComputeType(x);
  auto xg = x.to(type).reshape({x.size(0), groups, -1});
  auto mean = xg.mean(-1);
  auto var = (xg - mean.unsqueeze(-1)).pow(2).mean(-1);
  auto rstd = (var + eps).rsqrt();
  auto z = Affine(Normalized(x, mean, rstd, groups), weight, bias);
  return {(silu ? torch::silu(z) : z).to(x.scalar_type()), mean, rstd};
}

torch::Tensor GroupNormSiluBackward(const torch::Tensor& dy, const torch::Tensor& x,
                                    const torch::Tensor& mean, const torch::Tensor& rstd,
                                    const torch::Tensor& weight, const torch::Tensor& bias,
                                    int64_t groups, bool silu) {
  const auto type = ComputeType(x);
  auto xhat = Normalized(x, mean, rstd, groups);
  auto g = silu ? SiluGrad(dy, Affine(xhat, weight, bias)) : dy.to(type);
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
    int64_t groups, bool silu) {
  auto xhat = Normalized(x, mean, rstd, groups);
  auto dz = silu ? SiluGrad(dy, Affine(xhat, weight, bias)) : dy.to(xhat.scalar_type());
  std::vector<int64_t> reduce = {0};
  for (int64_t d = 2; d < x.dim(); ++d) reduce.push_back(d);
  return {(dz * xhat).sum(reduce), dz.sum(reduce)};
}

}  // namespace fused_reference

// ---- autograd Function ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#ifdef ADCTL_FUSED_CUDA
// Elements between consecutive rows of t's channels (t [N, C, ...] seen as [N·..., C]) when
// they are evenly spaced with the channels contiguous, else 0.
int64_t RowPitch(const torch::Tensor& t) {
  const auto m = t.movedim(1, -1);
  if (m.dim() < 2 || m.stride(-1) != 1 || m.stride(-2) < m.size(-1)) return 0;
  for (int64_t d = m.dim() - 3; d >= 0; --d) {
    if (m.size(d) > 1 && m.stride(d) != m.stride(d + 1) * m.size(d + 1)) return 0;
  }
  return m.stride(-2);
}
#endif

// The channels-last GroupNorm kernels serve x: a CUDA tensor stored channels-last whose
// channels split into groups they take.
bool ChannelsLastKernelApplies(const torch::Tensor& x, int64_t groups) {
#ifdef ADCTL_FUSED_CUDA
  return UseKernel(x) && IsChannelsLast(x) && x.size(0) <= 65535 &&
         fused_cuda::GroupNormChannelsLastFits(KernelType(x), x.size(1), groups);
#else
  (void)x, (void)groups;
  return false;
#endif
}

class GroupNormFunction : public torch::autograd::Function<GroupNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               int64_t groups, double eps, bool silu) {
    // Channels-last input stays so (its kernels read rows of channels); anything else is made
    // contiguous.
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined
    const bool rows = ChannelsLastKernelApplies(input, groups);
    auto x = rows ? Aligned(input) : input.contiguous();
    torch::Tensor y, mean, rstd;
    if (rows) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(x.device());
      const auto w = KernelParam(weight, x), b = KernelParam(bias, x);
      const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
      y = torch::empty_like(x);
      mean = torch::empty({n, groups}, x.options().dtype(torch::kFloat));
      rstd = torch::empty_like(mean);
      auto partial = torch::empty({n, fused_cuda::GroupNormChannelsLastChunks(n, s), groups, 2},
                                  mean.options());
      Check(fused_cuda::GroupNormChannelsLastForward(
                KernelType(x), x.data_ptr(), PtrOrNull(w), PtrOrNull(b), y.data_ptr(),
                mean.data_ptr<float>(), rstd.data_ptr<float>(), partial.data_ptr<float>(), n, s, c,
                groups, static_cast<float>(eps), silu, c10::cuda::getCurrentCUDAStream().stream()),
            "channels-last GroupNorm forward kernel");
#endif
    } else if (UseKernel(x)) {
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
                static_cast<float>(eps), silu, c10::cuda::getCurrentCUDAStream().stream()),
            "GroupNorm forward kernel");
#endif
    } else {
      auto r = fused_reference::GroupNormSiluForward(x, groups, weight, bias, eps, silu);
      y = SameLayout(r.y, input);
      mean = r.mean;
      rstd = r.rstd;
    }
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["silu"] = silu;
    return {y, input};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3],
               &rstd = saved[4];
    const int64_t groups = ctx->saved_data["groups"].toInt();
    const bool silu = ctx->saved_data["silu"].toBool();
    const bool rows = ChannelsLastKernelApplies(x, groups);
    // grads[1]: the pass-through's (x's other use), undefined when it had none.
    const auto& dy_in = grads[0].defined() ? grads[0] : torch::zeros_like(x);
    const auto dy = rows ? Aligned(SameLayout(dy_in.to(x.scalar_type()), x)) : dy_in.contiguous();
    const auto& dres_in = grads[1];
    // γ and β train in the motion modules' GroupNorm; they are frozen in the UNet's.
    const bool weight_grad = weight.defined() && weight.requires_grad();
    const bool bias_grad = bias.defined() && bias.requires_grad();
    torch::Tensor dx, dw, db;
    if (rows) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(x.device());
      const auto w = KernelParam(weight, x), b = KernelParam(bias, x);
      const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
      const int64_t chunks = fused_cuda::GroupNormChannelsLastChunks(n, s);
      const auto f32 = x.options().dtype(torch::kFloat);
      auto partial = torch::empty({n, chunks, groups, 2}, f32);
      torch::Tensor sums;
      if (weight_grad || bias_grad) sums = torch::empty({n * chunks, 2, c}, f32);
      dx = torch::empty_like(x);
      // The residual's gradient is read where it lies when its rows are evenly spaced (a channel
      // slice of a wider channels-last map, as the skip connections' come out of their
      // concatenation's backward); copied to x's layout otherwise.
      auto dres = dres_in.defined() ? dres_in.to(x.scalar_type()) : dres_in;
      int64_t pitch = dres.defined() ? RowPitch(dres) : 0;
      if (dres.defined() && pitch == 0) {
        dres = SameLayout(dres, x);
        pitch = c;
      }
      Check(fused_cuda::GroupNormChannelsLastBackward(
                KernelType(x), dy.data_ptr(), x.data_ptr(), mean.data_ptr<float>(),
                rstd.data_ptr<float>(), PtrOrNull(w), PtrOrNull(b), PtrOrNull(dres), pitch,
                dx.data_ptr(), partial.data_ptr<float>(),
                sums.defined() ? sums.data_ptr<float>() : nullptr, n, s, c, groups, silu,
                c10::cuda::getCurrentCUDAStream().stream()),
            "channels-last GroupNorm backward kernel");
      if (sums.defined()) {
        const auto total = sums.sum(0);
        dw = total[0];
        db = total[1];
      }
#endif
    } else if (UseKernel(x)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(x.device());
      const auto w = KernelParam(weight, x), b = KernelParam(bias, x);
      const auto dyx = dy.to(x.scalar_type());
      const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / (n * c);
      const auto stream = c10::cuda::getCurrentCUDAStream().stream();
      dx = torch::empty_like(x);
      Check(fused_cuda::GroupNormSiluBackward(KernelType(x), dyx.data_ptr(), x.data_ptr(),
                                              mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                              PtrOrNull(w), PtrOrNull(b), dx.data_ptr(), n, c, hw,
                                              groups, silu, stream),
            "GroupNorm backward kernel");
      if (weight_grad || bias_grad) {
        auto sums = torch::empty({n, 2, c}, x.options().dtype(torch::kFloat));
        Check(fused_cuda::GroupNormAffineBackward(
                  KernelType(x), dyx.data_ptr(), x.data_ptr(), mean.data_ptr<float>(),
                  rstd.data_ptr<float>(), PtrOrNull(w), PtrOrNull(b), sums.data_ptr<float>(), n, c,
                  hw, groups, silu, stream),
              "GroupNorm affine backward kernel");
        const auto total = sums.sum(0);
        dw = total[0];
        db = total[1];
      }
#endif
    } else {
      dx = SameLayout(
          fused_reference::GroupNormSiluBackward(dy, x, mean, rstd, weight, bias, groups, silu), x);
      if (weight_grad || bias_grad) {
        std::tie(dw, db) = fused_reference::GroupNormSiluAffineBackward(dy, x, mean, rstd, weight,
                                                                        bias, groups, silu);
      }
    }
    if (!rows && dres_in.defined()) dx = dx + dres_in.to(dx.scalar_type());
    torch::Tensor dweight, dbias;
    if (weight_grad) dweight = dw.to(weight.scalar_type());
    if (bias_grad) dbias = db.to(bias.scalar_type());
    return {dx, dweight, dbias, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

// ---- dispatchers ----

std::pair<torch::Tensor, torch::Tensor> FusedGroupNormResidual(const torch::Tensor& x,
                                                               int64_t groups,
                                                               const torch::Tensor& weight,
                                                               const torch::Tensor& bias,
                                                               double eps, bool silu) {
  TORCH_CHECK(x.dim() >= 2 && x.size(1) % groups == 0, "GroupNorm: ", x.size(1),
              " channels do not split into ", groups, " groups");
  // Without affine parameters: γ = 1, β = 0 (autograd functions take defined tensors only).
  const auto o = x.options().requires_grad(false);
  auto out = GroupNormFunction::apply(x, weight.defined() ? weight : torch::ones({x.size(1)}, o),
                                      bias.defined() ? bias : torch::zeros({x.size(1)}, o), groups,
                                      eps, silu);
  return {out[0], out[1]};
}

torch::Tensor FusedGroupNorm(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, bool silu) {
  return FusedGroupNormResidual(x, groups, weight, bias, eps, silu).first;
}

torch::Tensor FusedGroupNormSilu(const torch::Tensor& x, int64_t groups,
                                 const torch::Tensor& weight, const torch::Tensor& bias,
                                 double eps) {
  return FusedGroupNorm(x, groups, weight, bias, eps, /*silu=*/true);
}

std::pair<torch::Tensor, torch::Tensor> GroupNormResidual(const torch::Tensor& x, int64_t groups,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          bool silu) {
  if (FusedKernelsEnabled() && UseKernel(x)) {
    return FusedGroupNormResidual(x, groups, weight, bias, eps, silu);
  }
  auto y = torch::group_norm(x, groups, weight, bias, eps);
  return {silu ? torch::silu(y) : y, x};
}

torch::Tensor GroupNormSilu(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                            const torch::Tensor& bias, double eps) {
  return GroupNormResidual(x, groups, weight, bias, eps, /*silu=*/true).first;
}

torch::Tensor GroupNormPlain(const torch::Tensor& x, int64_t groups, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps) {
  return GroupNormResidual(x, groups, weight, bias, eps, /*silu=*/false).first;
}

}  // namespace adctl
