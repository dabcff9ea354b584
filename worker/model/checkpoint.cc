#include "worker/model/checkpoint.h"

namespace adctl {
namespace {

struct BlockHolder : torch::CustomClassHolder {
  explicit BlockHolder(BlockFn f) : fn(std::move(f)) {}
  BlockFn fn;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, BlockFn fn) {
    auto holder = c10::make_intrusive<BlockHolder>(fn);
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    ctx->save_for_backward({x});
    return fn(x);  // grad mode is off inside forward: no activations kept
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto holder =
        c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["fn"].toCapsule());
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = holder->fn(x);
    }
    torch::autograd::backward({y}, {grad_out[0]});
    return {x.grad(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor MaybeCheckpoint(bool enabled, const BlockFn& fn, const torch::Tensor& x) {
  if (!enabled || !torch::GradMode::is_enabled()) return fn(x);
  auto input = x.requires_grad() ? x : x.detach().requires_grad_(true);
  return CheckpointFunction::apply(input, fn);
}

}  // namespace adctl
