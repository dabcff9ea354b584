// Self-attention over short sequences (the motion modules' attention over frames): the reference
// math, the autograd Function over the kernels of short_attention.cu, and the entry points.
#include "worker/kernels/short_attention.h"

#include <cmath>
#include <vector>

#include "worker/kernels/dispatch.h"
#include "worker/kernels/dispatch_internal.h"
#include "worker/kernels/short_attention_cuda.h"
#include "worker/kernels/short_attention_internal.h"

namespace adctl {

// ---- CPU reference ----

namespace fused_reference {

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

// ---- autograd Function ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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

}  // namespace

// ---- dispatchers ----

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

}  // namespace adctl
