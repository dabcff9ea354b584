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

class ShortAttentionFunction : public torch::autograd::Function<ShortAttentionFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& k_in, const torch::Tensor& v_in,
                               int64_t heads) {
    auto q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    torch::Tensor out, lse;
    if (UseKernel(q)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(q.device());
      const int64_t n = q.size(0), length = q.size(1), d = q.size(2) / heads;
      out = torch::empty_like(q);
      lse = torch::empty({n * heads, length}, q.options().dtype(torch::kFloat));
      Check(fused_cuda::ShortAttentionForward(
                KernelType(q), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                lse.data_ptr<float>(), n, length, heads, d,
                static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
                c10::cuda::getCurrentCUDAStream().stream()),
            "short attention forward kernel");
#endif
    } else {
      auto r = fused_reference::ShortAttentionForward(q, k, v, heads);
      out = r.out;
      lse = r.lse;
    }
    ctx->save_for_backward({q, k, v, lse});
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &lse = saved[3];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const auto dout = grads[0].to(q.scalar_type()).contiguous();
    if (UseKernel(q)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(q.device());
      const int64_t n = q.size(0), length = q.size(1), d = q.size(2) / heads;
      auto dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
      Check(fused_cuda::ShortAttentionBackward(
                KernelType(q), dout.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                lse.data_ptr<float>(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), n, length,
                heads, d, static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
                c10::cuda::getCurrentCUDAStream().stream()),
            "short attention backward kernel");
      return {dq, dk, dv, torch::Tensor()};
#endif
    }
    auto g = fused_reference::ShortAttentionBackward(dout, q, k, v, lse, heads);
    return {g[0], g[1], g[2], torch::Tensor()};
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

bool ShortAttentionApplies(const torch::Tensor& q, const torch::Tensor& k, int64_t heads) {
#ifdef ADCTL_FUSED_CUDA
  if (!FusedKernelsEnabled() || !UseKernel(q) || q.dim() != 3 || k.sizes() != q.sizes()) {
    return false;
  }
  return q.size(1) <= fused_cuda::kShortAttentionMaxLength && q.size(2) % heads == 0 &&
         q.size(2) / heads <= fused_cuda::kShortAttentionMaxHeadDim;
#else
  (void)q, (void)k, (void)heads;
  return false;
#endif
}

torch::Tensor FusedShortAttention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, int64_t heads) {
  TORCH_CHECK(
      q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes() && q.size(2) % heads == 0,
      "short attention: q, k, v must be [N, L, heads·d] alike; got ", q.sizes(), ", ", k.sizes(),
      ", ", v.sizes(), " with ", heads, " heads");
  return ShortAttentionFunction::apply(q, k, v, heads);
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

namespace {
// [N, L, heads·d] → [N, heads, L, d] in the compute type, and back.
torch::Tensor Heads(const torch::Tensor& t, int64_t heads, torch::ScalarType type) {
  return t.to(type).view({t.size(0), t.size(1), heads, t.size(2) / heads}).transpose(1, 2);
}
torch::Tensor Tokens(const torch::Tensor& t) {
  return t.transpose(1, 2).reshape({t.size(0), t.size(2), -1});
}
}  // namespace

AttentionResult ShortAttentionForward(const torch::Tensor& q, const torch::Tensor& k,
                                      const torch::Tensor& v, int64_t heads) {
  const auto type = ComputeType(q);
  auto qh = Heads(q, heads, type), kh = Heads(k, heads, type), vh = Heads(v, heads, type);
  const double scale = 1.0 / std::sqrt(static_cast<double>(qh.size(-1)));
  auto scores = torch::matmul(qh, kh.transpose(-1, -2)) * scale;
  auto lse = torch::logsumexp(scores, -1);
  auto out = torch::matmul(torch::exp(scores - lse.unsqueeze(-1)), vh);
  return {Tokens(out).to(q.scalar_type()), lse.reshape({-1, q.size(1)})};
}

std::vector<torch::Tensor> ShortAttentionBackward(const torch::Tensor& dout, const torch::Tensor& q,
                                                  const torch::Tensor& k, const torch::Tensor& v,
                                                  const torch::Tensor& lse, int64_t heads) {
  const auto type = ComputeType(q);
  auto qh = Heads(q, heads, type), kh = Heads(k, heads, type), vh = Heads(v, heads, type);
  auto dh = Heads(dout, heads, type);
  const double scale = 1.0 / std::sqrt(static_cast<double>(qh.size(-1)));
  auto l = lse.to(type).view({q.size(0), heads, q.size(1), 1});
  auto p = torch::exp(torch::matmul(qh, kh.transpose(-1, -2)) * scale - l);
  auto dv = torch::matmul(p.transpose(-1, -2), dh);
  auto dp = torch::matmul(dh, vh.transpose(-1, -2));
  auto ds = p * (dp - (p * dp).sum(-1, /*keepdim=*/true));
  auto dq = torch::matmul(ds, kh) * scale;
  auto dk = torch::matmul(ds.transpose(-1, -2), qh) * scale;
  const auto out_type = q.scalar_type();
  return {Tokens(dq).to(out_type), Tokens(dk).to(out_type), Tokens(dv).to(out_type)};
}

}  // namespace fused_reference
}  // namespace adctl
