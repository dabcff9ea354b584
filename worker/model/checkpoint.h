// Gradient checkpointing of one block: run it without keeping activations, recompute it in
// backward. LibTorch's C++ API has no torch.utils.checkpoint, so this is a custom autograd
// function. Like AnimateDiff's, it makes the block input require grad when it does not (the
// layers before the first motion module are frozen), otherwise the block's parameters would
// get no gradient (AnimateDiff's animatediff/models/attention.py). The block must be deterministic.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace adctl {

using BlockFn = std::function<torch::Tensor(const torch::Tensor&)>;

// fn(x) when grad mode is off or `enabled` is false; otherwise the checkpointed call.
torch::Tensor MaybeCheckpoint(bool enabled, const BlockFn& fn, const torch::Tensor& x);

}  // namespace adctl
