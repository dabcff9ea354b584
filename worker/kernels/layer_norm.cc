// LayerNorm over the last dimension (+ the motion modules' position table, + a residual's
// pass-through): the reference math, the autograd Function over the kernels of layer_norm.cu, and
// the dispatchers.
#include "worker/kernels/layer_norm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "worker/kernels/dispatch.h"
#include "worker/kernels/dispatch_internal.h"
#include "worker/kernels/layer_norm_cuda.h"
#include "worker/kernels/layer_norm_internal.h"

namespace adctl {

// ---- CPU reference ----

namespace {

// LayerNorm's x̂ = (x − mean) · rstd over rows of the last dimension: [rows, C] in the compute
// type.
torch::Tensor RowsNormalized(const torch::Tensor& x, const torch::Tensor& mean,
                             const torch::Tensor& rstd) {
  const auto type = ComputeType(x);
  return (x.to(type).reshape({-1, x.size(-1)}) - mean.to(type).unsqueeze(-1)) *
         rstd.to(type).unsqueeze(-1);
}

}  // namespace

namespace fused_reference {

LayerNormResult LayerNormForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, double eps, const torch::Tensor& add,
                                 int64_t repeat) {
  const auto type = ComputeType(x);
  const int64_t c = x.size(-1);
  auto xr = x.to(type).reshape({-1, c});
  auto mean = xr.mean(-1);
  auto rstd = ((xr - mean.unsqueeze(-1)).pow(2).mean(-1) + eps).rsqrt();
  auto z = (xr - mean.unsqueeze(-1)) * rstd.unsqueeze(-1);
  if (weight.defined()) z = z * weight.to(type);
  if (bias.defined()) z = z + bias.to(type);
  if (add.defined() && add.numel() > 0) {
    const auto table = add.to(type).reshape({-1, c});
    z = (z.view({-1, table.size(0), repeat, c}) + table.unsqueeze(1)).view({-1, c});
  }
  return {z.view(x.sizes()).to(x.scalar_type()), mean, rstd};
}

torch::Tensor LayerNormBackward(const torch::Tensor& dy, const torch::Tensor& x,
                                const torch::Tensor& mean, const torch::Tensor& rstd,
                                const torch::Tensor& weight) {
  const auto type = ComputeType(x);
  const int64_t c = x.size(-1);
  auto xhat = RowsNormalized(x, mean, rstd);
  auto g = dy.to(type).reshape({-1, c});
  if (weight.defined()) g = g * weight.to(type);
  auto dx = rstd.to(type).unsqueeze(-1) *
            (g - g.mean(-1, /*keepdim=*/true) - xhat * (g * xhat).mean(-1, /*keepdim=*/true));
  return dx.view(x.sizes()).to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> LayerNormAffineBackward(const torch::Tensor& dy,
                                                                const torch::Tensor& x,
                                                                const torch::Tensor& mean,
                                                                const torch::Tensor& rstd) {
  const auto type = ComputeType(x);
  const int64_t c = x.size(-1);
  auto xhat = RowsNormalized(x, mean, rstd);
  auto g = dy.to(type).reshape({-1, c});
  return {(g * xhat).sum(0), g.sum(0)};
}

}  // namespace fused_reference

// ---- autograd Function ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// LayerNorm over the last dimension (+ add [P, C], row r of x as [rows, C] taking add's row
// (r / repeat) mod P). weight and bias are [C] in any float type (the motion modules' fp32
// parameters are read as they are, and their gradients come back in fp32); add is x-shaped-periodic
// or empty. Outputs: the norm, and x itself (a view) for the residual of x + f(LayerNorm(x)): the
// backward adds that output's gradient to the norm's in its own pass, where autograd would sum
// the two gradients of x with a kernel of its own.
class LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& add, double eps, int64_t repeat) {
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined
    auto x = input.contiguous();
    torch::Tensor y, mean, rstd;
    if (UseKernel(x)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(x.device());
      const int64_t c = x.size(-1), rows = x.numel() / std::max<int64_t>(c, 1);
      x = Aligned(x);
      const auto w = KernelParam(weight, x), b = KernelParam(bias, x);
      const auto a = add.numel() > 0 ? Aligned(add.to(x.scalar_type()).contiguous()) : add;
      y = torch::empty_like(x);
      mean = torch::empty({rows}, x.options().dtype(torch::kFloat));
      rstd = torch::empty_like(mean);
      Check(fused_cuda::LayerNormForward(
                KernelType(x), x.data_ptr(), w.data_ptr(), b.data_ptr(),
                a.numel() > 0 ? a.data_ptr() : nullptr, a.numel() > 0 ? a.size(0) : 1, repeat,
                y.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(), rows, c,
                static_cast<float>(eps), c10::cuda::getCurrentCUDAStream().stream()),
            "LayerNorm forward kernel");
#endif
    } else {
      auto r = fused_reference::LayerNormForward(x, weight, bias, eps, add, repeat);
      y = r.y;
      mean = r.mean;
      rstd = r.rstd;
    }
    ctx->save_for_backward({x, weight, bias, mean, rstd});
    ctx->saved_data["add_grad"] = add.requires_grad();
    ctx->saved_data["period"] = add.numel() > 0 ? add.size(0) : int64_t{1};
    ctx->saved_data["repeat"] = repeat;
    return {y, input};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3],
               &rstd = saved[4];
    const auto dy = grads[0].defined() ? grads[0].contiguous() : torch::zeros_like(x);
    const auto& dres = grads[1];  // the pass-through's, undefined when it had no use
    const bool weight_grad = weight.requires_grad(), bias_grad = bias.requires_grad();
    const int64_t c = x.size(-1);
    torch::Tensor dx, dweight, dbias, dadd;
    if (UseKernel(x)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(x.device());
      const int64_t rows = x.numel() / std::max<int64_t>(c, 1);
      const auto w = KernelParam(weight, x);
      const auto d = Aligned(dy.to(x.scalar_type()).contiguous());
      const auto r = dres.defined() ? Aligned(dres.to(x.scalar_type()).contiguous()) : dres;
      dx = torch::empty_like(x);
      torch::Tensor partial;
      if (weight_grad || bias_grad) {
        partial = torch::empty({fused_cuda::LayerNormPartialBlocks(rows, c), 2, c},
                               x.options().dtype(torch::kFloat));
      }
      Check(fused_cuda::LayerNormBackward(KernelType(x), d.data_ptr(), x.data_ptr(),
                                          mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                          w.data_ptr(), PtrOrNull(r), dx.data_ptr(),
                                          partial.defined() ? partial.data_ptr<float>() : nullptr,
                                          rows, c, c10::cuda::getCurrentCUDAStream().stream()),
            "LayerNorm backward kernel");
      if (partial.defined()) {
        const auto sums = partial.sum(0);
        if (weight_grad) dweight = sums[0].to(weight.scalar_type());
        if (bias_grad) dbias = sums[1].to(bias.scalar_type());
      }
#endif
    } else {
      dx = fused_reference::LayerNormBackward(dy, x, mean, rstd, weight);
      if (dres.defined()) dx = (dx + dres).to(x.scalar_type());
      if (weight_grad || bias_grad) {
        auto [dw, db] = fused_reference::LayerNormAffineBackward(dy, x, mean, rstd);
        if (weight_grad) dweight = dw.to(weight.scalar_type());
        if (bias_grad) dbias = db.to(bias.scalar_type());
      }
    }
    if (ctx->saved_data["add_grad"].toBool()) {
      const int64_t period = ctx->saved_data["period"].toInt();
      const int64_t repeat = ctx->saved_data["repeat"].toInt();
      dadd = dy.reshape({-1, period, repeat, c}).sum(std::vector<int64_t>{0, 2});
    }
    return {dx, dweight, dbias, dadd, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

// ---- dispatchers ----

std::pair<torch::Tensor, torch::Tensor> FusedLayerNormResidual(const torch::Tensor& x,
                                                               const torch::Tensor& weight,
                                                               const torch::Tensor& bias,
                                                               double eps, const torch::Tensor& add,
                                                               int64_t repeat) {
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) >= 1, "LayerNorm: x needs a last dimension, got ",
              x.sizes());
  const int64_t c = x.size(-1), rows = x.numel() / c;
  TORCH_CHECK(!weight.defined() || weight.numel() == c, "LayerNorm: weight has ",
              weight.defined() ? weight.numel() : 0, " elements for ", c, " channels");
  TORCH_CHECK(!bias.defined() || bias.numel() == c, "LayerNorm: bias has ",
              bias.defined() ? bias.numel() : 0, " elements for ", c, " channels");
  const auto o = x.options().requires_grad(false);
  torch::Tensor table = torch::empty({0}, o);
  if (add.defined()) {
    TORCH_CHECK(repeat >= 1 && add.numel() > 0 && add.size(-1) == c &&
                    rows % (add.numel() / c * repeat) == 0,
                "LayerNorm: the added table ", add.sizes(), " must be [P, ", c, "] with P",
                repeat == 1 ? "" : " · " + std::to_string(repeat) + " (its rows' repeat)",
                " dividing the ", rows, " rows");
    table = add.reshape({-1, c});
  }
  auto out =
      LayerNormFunction::apply(x, weight.defined() ? weight : torch::ones({c}, o),
                               bias.defined() ? bias : torch::zeros({c}, o), table, eps, repeat);
  return {out[0], out[1]};
}

torch::Tensor FusedLayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, const torch::Tensor& add,
                             int64_t repeat) {
  return FusedLayerNormResidual(x, weight, bias, eps, add, repeat).first;
}

namespace {
bool LayerNormKernelApplies(const torch::Tensor& x) {
#ifdef ADCTL_FUSED_CUDA
  return FusedKernelsEnabled() && UseKernel(x) && x.dim() >= 1 &&
         fused_cuda::LayerNormFits(KernelType(x), x.size(-1));
#else
  (void)x;
  return false;
#endif
}
}  // namespace

torch::Tensor LayerNorm(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, double eps, const torch::Tensor& add,
                        int64_t repeat) {
  if (LayerNormKernelApplies(x)) return FusedLayerNorm(x, weight, bias, eps, add, repeat);
  const auto as = [&x](const torch::Tensor& p) { return p.defined() ? p.to(x.scalar_type()) : p; };
  auto y = torch::layer_norm(x, {x.size(-1)}, as(weight), as(bias), eps);
  if (!add.defined()) return y;
  const int64_t c = x.size(-1);
  return (y.reshape({-1, add.numel() / c, repeat, c}) + as(add).reshape({-1, 1, c}))
      .view(x.sizes());
}

std::pair<torch::Tensor, torch::Tensor> LayerNormResidual(const torch::Tensor& x,
                                                          const torch::Tensor& weight,
                                                          const torch::Tensor& bias, double eps,
                                                          const torch::Tensor& add,
                                                          int64_t repeat) {
  if (LayerNormKernelApplies(x)) return FusedLayerNormResidual(x, weight, bias, eps, add, repeat);
  return {LayerNorm(x, weight, bias, eps, add, repeat), x};
}

}  // namespace adctl
