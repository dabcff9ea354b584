// The layout changes into and out of the token sequences ([B, R, S] ↔ [B, S, R], the residual add
// folded in): the autograd Functions over the kernel of token_transpose.cu, and the dispatchers.
#include "worker/kernels/token_transpose.h"

#include "worker/kernels/dispatch.h"
#include "worker/kernels/dispatch_internal.h"
#include "worker/kernels/token_transpose_cuda.h"
#include "worker/kernels/token_transpose_internal.h"

namespace adctl {

// ---- autograd Function ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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

// The kernels' grid limits (batch ≤ 65535, ⌈rows / 32⌉ ≤ 65535).
bool TransposeFits(const torch::Tensor& x) {
  return x.dim() == 3 && x.size(0) <= 65535 && x.size(1) <= 65535LL * 32;
}

}  // namespace

// ---- dispatchers ----

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

}  // namespace adctl
