#include "worker/kernels/fused_ops.h"

#include <atomic>
#include <cmath>

#ifdef ADCTL_FUSED_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "worker/kernels/channel_bias_cuda.h"
#include "worker/kernels/geglu_cuda.h"
#include "worker/kernels/group_norm_cuda.h"
#include "worker/kernels/layer_norm_cuda.h"
#include "worker/kernels/short_attention_cuda.h"
#include "worker/kernels/token_transpose_cuda.h"
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

// LayerNorm's x̂ = (x − mean) · rstd over rows of the last dimension: [rows, C] in the compute
// type.
torch::Tensor RowsNormalized(const torch::Tensor& x, const torch::Tensor& mean,
                             const torch::Tensor& rstd) {
  const auto type = ComputeType(x);
  return (x.to(type).reshape({-1, x.size(-1)}) - mean.to(type).unsqueeze(-1)) *
         rstd.to(type).unsqueeze(-1);
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

// The kernels read 16 bytes at a time from 16-byte aligned rows: a view that starts elsewhere is
// copied first.
torch::Tensor Aligned(const torch::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 ? t : t.clone();
}

// t (x's shape) in x's memory layout: a copy where the strides differ.
torch::Tensor SameLayout(const torch::Tensor& t, const torch::Tensor& x) {
  if (t.strides() == x.strides()) return t;
  return torch::empty_like(x, t.options()).copy_(t);
}

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

// Self-attention on one projection's output qkv = [q, k, v] ([N, L, 3 · inner], or a
// channels-last clip's [B, L, P, 3 · inner] with the B · P sequences over L interleaved): the
// kernels read the thirds in place and write dq, dk, dv into one gradient, so neither direction
// copies.
#ifdef ADCTL_FUSED_CUDA
struct AttentionGeometry {
  int64_t sequences, length, interleave, inner;
};

AttentionGeometry GeometryOf(const torch::Tensor& qkv) {
  const int64_t interleave = qkv.dim() == 4 ? qkv.size(2) : 1;
  return {qkv.size(0) * interleave, qkv.size(1), interleave, qkv.size(-1) / 3};
}
#endif

class ShortAttentionFunction : public torch::autograd::Function<ShortAttentionFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, int64_t heads) {
    auto qkv = qkv_in.contiguous();
    torch::Tensor out, lse;
    if (UseKernel(qkv)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(qkv.device());
      const auto g = GeometryOf(qkv);
      const int64_t d = g.inner / heads;
      auto sizes = qkv.sizes().vec();
      sizes.back() = g.inner;
      out = torch::empty(sizes, qkv.options());
      lse = torch::empty({g.sequences * heads, g.length}, qkv.options().dtype(torch::kFloat));
      const auto* base = static_cast<const char*>(qkv.data_ptr());
      const int64_t third = g.inner * qkv.element_size();
      Check(fused_cuda::ShortAttentionForward(
                KernelType(qkv), base, base + third, base + 2 * third, out.data_ptr(),
                lse.data_ptr<float>(), g.sequences, g.length, heads, d, 3 * g.inner, g.interleave,
                static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
                c10::cuda::getCurrentCUDAStream().stream()),
            "short attention forward kernel");
#endif
    } else {
      auto parts = ClipSequences(qkv).chunk(3, -1);
      auto r = fused_reference::ShortAttentionForward(parts[0], parts[1], parts[2], heads);
      out = SequencesToClipRows(r.out, qkv);
      lse = r.lse;
    }
    ctx->save_for_backward({qkv, lse});
    ctx->saved_data["heads"] = heads;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &qkv = saved[0], &lse = saved[1];
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const auto dout = grads[0].to(qkv.scalar_type()).contiguous();
    if (UseKernel(qkv)) {
#ifdef ADCTL_FUSED_CUDA
      const c10::cuda::CUDAGuard guard(qkv.device());
      const auto g = GeometryOf(qkv);
      const int64_t d = g.inner / heads;
      auto dqkv = torch::empty_like(qkv);
      const auto* base = static_cast<const char*>(qkv.data_ptr());
      auto* dbase = static_cast<char*>(dqkv.data_ptr());
      const int64_t third = g.inner * qkv.element_size();
      Check(fused_cuda::ShortAttentionBackward(
                KernelType(qkv), dout.data_ptr(), base, base + third, base + 2 * third,
                lse.data_ptr<float>(), dbase, dbase + third, dbase + 2 * third, g.sequences,
                g.length, heads, d, 3 * g.inner, g.interleave,
                static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
                c10::cuda::getCurrentCUDAStream().stream()),
            "short attention backward kernel");
      return {dqkv, torch::Tensor()};
#endif
    }
    auto parts = ClipSequences(qkv).chunk(3, -1);
    auto grad = fused_reference::ShortAttentionBackward(ClipSequences(dout), parts[0], parts[1],
                                                        parts[2], lse, heads);
    return {SequencesToClipRows(torch::cat(grad, -1), qkv), torch::Tensor()};
  }
};

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

// Σ over the rows of g [rows, c] in the compute type: the column-strip kernel on CUDA tensors.
torch::Tensor ColumnSum(const torch::Tensor& g) {
  if (UseKernel(g)) {
#ifdef ADCTL_FUSED_CUDA
    const c10::cuda::CUDAGuard guard(g.device());
    const auto d = g.contiguous();
    const int64_t rows = d.size(0), c = d.size(1);
    auto partial = torch::empty({fused_cuda::LayerNormPartialBlocks(rows, c), 2, c},
                                d.options().dtype(torch::kFloat));
    Check(fused_cuda::ColumnSums(KernelType(d), d.data_ptr(), partial.data_ptr<float>(), rows, c,
                                 c10::cuda::getCurrentCUDAStream().stream()),
          "column sum kernel");
    return partial.select(1, 1).sum(0);
#endif
  }
  return g.to(ComputeType(g)).sum(0);
}

// y = x Wᵀ + b as LibTorch's linear computes it, with b's gradient summed by the column-strip
// kernel (LibTorch's sum over the rows of a [131072, 320] bf16 gradient runs at a fraction of
// the memory rate); x's and W's gradients are the matrix products linear's own backward takes.
class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    ctx->save_for_backward({x, weight});
    return torch::linear(x, weight, bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1];
    const int64_t out = weight.size(0), in = weight.size(1);
    const auto dy = grads[0].reshape({-1, out});
    torch::Tensor dx, dweight, dbias;
    if (ctx->needs_input_grad(0)) dx = dy.mm(weight).view(x.sizes());
    if (ctx->needs_input_grad(1)) dweight = dy.t().mm(x.reshape({-1, in}));
    if (ctx->needs_input_grad(2)) dbias = ColumnSum(dy).to(grads[0].scalar_type());
    return {dx, dweight, dbias};
  }
};

// in [B, R, S] → [B, S, R] (+ add, [B, S, R]): the tiled kernel on CUDA tensors, LibTorch's
// copy of the transposed view otherwise.
torch::Tensor Transposed(const torch::Tensor& in, const torch::Tensor& add) {
  if (UseKernel(in)) {
#ifdef ADCTL_FUSED_CUDA
    const c10::cuda::CUDAGuard guard(in.device());
    auto out = torch::empty({in.size(0), in.size(2), in.size(1)}, in.options());
    const auto extra = add.defined() ? add.to(in.scalar_type()).contiguous() : add;
    Check(fused_cuda::BatchedTranspose(KernelType(in), in.data_ptr(), PtrOrNull(extra),
                                       out.data_ptr(), in.size(0), in.size(1), in.size(2),
                                       c10::cuda::getCurrentCUDAStream().stream()),
          "transpose kernel");
    return out;
#endif
  }
  auto out = in.transpose(1, 2);
  return add.defined() ? (add + out).to(in.scalar_type()) : out.contiguous();
}

class TransposeFunction : public torch::autograd::Function<TransposeFunction> {
 public:
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x) {
    return Transposed(x.contiguous(), {});
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {Transposed(grads[0].contiguous(), {})};
  }
};

class AddTransposedFunction : public torch::autograd::Function<AddTransposedFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& y) {
    ctx->saved_data["y_type"] = static_cast<int64_t>(y.scalar_type());
    return Transposed(y.to(x.scalar_type()).contiguous(), x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto y_type = static_cast<torch::ScalarType>(ctx->saved_data["y_type"].toInt());
    const auto g = grads[0].contiguous();
    return {g, Transposed(g, {}).to(y_type)};
  }
};

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

// The kernels' grid limits (batch ≤ 65535, ⌈rows / 32⌉ ≤ 65535).
bool TransposeFits(const torch::Tensor& x) {
  return x.dim() == 3 && x.size(0) <= 65535 && x.size(1) <= 65535LL * 32;
}

}  // namespace

torch::Tensor ClipSequences(const torch::Tensor& t) {
  if (t.dim() == 3) return t;
  return t.permute({0, 2, 1, 3}).reshape({t.size(0) * t.size(2), t.size(1), t.size(3)});
}

torch::Tensor SequencesToClipRows(const torch::Tensor& t, const torch::Tensor& like) {
  if (like.dim() == 3) return t;
  return t.view({like.size(0), like.size(2), like.size(1), t.size(-1)})
      .permute({0, 2, 1, 3})
      .contiguous();
}

bool IsChannelsLast(const torch::Tensor& x) {
  return x.dim() >= 3 && !x.is_contiguous() && x.movedim(1, -1).is_contiguous();
}

bool FusedKernelsBuilt() {
#ifdef ADCTL_FUSED_CUDA
  return true;
#else
  return false;
#endif
}

void SetFusedKernels(bool on) { fused_enabled.store(on); }
bool FusedKernelsEnabled() { return fused_enabled.load(); }

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

torch::Tensor FusedTranspose(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 3, "transpose: expected [B, R, S], got ", x.sizes());
  return TransposeFunction::apply(x);
}

torch::Tensor FusedAddTransposed(const torch::Tensor& x, const torch::Tensor& y) {
  TORCH_CHECK(x.dim() == 3 && y.dim() == 3 && x.size(0) == y.size(0) && x.size(1) == y.size(2) &&
                  x.size(2) == y.size(1),
              "add transposed: expected x [B, R, S] and y [B, S, R], got ", x.sizes(), " and ",
              y.sizes());
  return AddTransposedFunction::apply(x, y);
}

torch::Tensor TransposeTokens(const torch::Tensor& x) {
  if (FusedKernelsEnabled() && UseKernel(x) && TransposeFits(x)) return FusedTranspose(x);
  return x.transpose(1, 2).contiguous();
}

torch::Tensor AddTransposed(const torch::Tensor& x, const torch::Tensor& y) {
  if (FusedKernelsEnabled() && UseKernel(x) && y.scalar_type() == x.scalar_type() &&
      y.device() == x.device() && TransposeFits(y)) {
    return FusedAddTransposed(x, y);
  }
  return x + y.transpose(1, 2);
}

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

torch::Tensor FusedGeglu(const torch::Tensor& h) {
  TORCH_CHECK(h.dim() >= 1 && h.size(-1) % 2 == 0, "GEGLU: the last dimension (", h.size(-1),
              ") must be even");
  return GegluFunction::apply(h);
}

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

torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight,
                          const torch::Tensor& bias) {
  TORCH_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: x ",
              x.sizes(), " does not fit the weight ", weight.sizes());
  TORCH_CHECK(bias.defined() && bias.dim() == 1 && bias.size(0) == weight.size(0),
              "linear: the fused layer takes a [", weight.size(0), "] bias");
  return LinearFunction::apply(x, weight, bias);
}

torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  if (FusedKernelsEnabled() && UseKernel(x) && bias.defined() && bias.requires_grad() &&
      torch::GradMode::is_enabled() && weight.dim() == 2 && bias.dim() == 1) {
    return FusedLinear(x, weight, bias);
  }
  return torch::linear(x, weight, bias);
}

bool ShortAttentionApplies(const torch::Tensor& x, int64_t inner, int64_t heads) {
#ifdef ADCTL_FUSED_CUDA
  if (!FusedKernelsEnabled() || !UseKernel(x) || (x.dim() != 3 && x.dim() != 4)) return false;
  return x.size(1) <= fused_cuda::kShortAttentionMaxLength && inner % heads == 0 &&
         inner / heads <= fused_cuda::kShortAttentionMaxHeadDim;
#else
  (void)x, (void)inner, (void)heads;
  return false;
#endif
}

torch::Tensor FusedShortSelfAttention(const torch::Tensor& qkv, int64_t heads) {
  TORCH_CHECK(
      (qkv.dim() == 3 || qkv.dim() == 4) && qkv.size(-1) % (3 * heads) == 0,
      "short attention: qkv must be [N, L, 3 · heads · d] or [B, L, P, 3 · heads · d]; got ",
      qkv.sizes(), " with ", heads, " heads");
  return ShortAttentionFunction::apply(qkv, heads);
}

torch::Tensor FusedShortAttention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, int64_t heads) {
  TORCH_CHECK(
      q.dim() == 3 && k.sizes() == q.sizes() && v.sizes() == q.sizes() && q.size(2) % heads == 0,
      "short attention: q, k, v must be [N, L, heads·d] alike; got ", q.sizes(), ", ", k.sizes(),
      ", ", v.sizes(), " with ", heads, " heads");
  return FusedShortSelfAttention(torch::cat({q, k, v}, -1), heads);
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

torch::Tensor Geglu(const torch::Tensor& h) {
  if (FusedKernelsEnabled() && UseKernel(h)) return FusedGeglu(h);
  auto parts = h.chunk(2, -1);
  return parts[0] * torch::gelu(parts[1]);
}

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
}  // namespace adctl
