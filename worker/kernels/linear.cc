// x Wᵀ + b with the bias gradient summed by layer_norm.cu's column-strip kernel (ColumnSums): no
// reference math of its own (its backward on the CPU is LibTorch's sum), the autograd Function,
// and the dispatcher.
#include "worker/kernels/linear.h"

#include "worker/kernels/dispatch.h"
#include "worker/kernels/dispatch_internal.h"
#include "worker/kernels/layer_norm_cuda.h"
#include "worker/kernels/linear_internal.h"

namespace adctl {

// ---- autograd Function ----

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

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

}  // namespace

// ---- dispatchers ----

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

}  // namespace adctl
