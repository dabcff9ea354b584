// AdamW over the trainable motion-module parameters, and the learning-rate schedule.
//
// The update is PyTorch's torch.optim.AdamW (decoupled weight decay, bias-corrected moments):
// on a GPU with LibTorch 2.x one fused kernel over all ~550 tensors (at::_fused_adamw_, as
// `fused=True`), else the multi-tensor `_foreach` formula (a handful of kernels). State (exp_avg,
// exp_avg_sq, step) is saved with checkpoints under the parameters' names. Thread-compatible.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "worker/model/weights.h"

namespace adctl {

class AdamW {
 public:
  // `allow_fused`: false keeps the `_foreach` formula everywhere (the tests compare the two).
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, const TrainSpec& spec,
        bool allow_fused = true);

  // One update with learning rate `lr` from the parameters' .grad.
  void Step(double lr);
  // Zeroes gradients in place (they may be views into all-reduce buckets, or a CUDA graph's
  // static buffers), or with `release` drops them: the next backward then hands each parameter
  // its gradient tensor instead of adding it to zeros (a step saves a zero fill and an add per
  // parameter, and the gradients' memory between steps).
  void ZeroGrad(bool release = false);
  // Clips the global L2 norm of the gradients to `max_norm` (<= 0: no clipping); returns the
  // norm before clipping as a 0-dim fp32 tensor on the parameters' device. Nothing waits for
  // the device (no host sync): the caller reads the norm with the step's other numbers.
  torch::Tensor ClipGradNorm(double max_norm);

  int64_t step() const { return step_; }
  bool fused() const { return fused_step_.defined(); }
  TensorMap StateDict() const;  // "exp_avg.<name>", "exp_avg_sq.<name>", "step"
  Status LoadStateDict(const TensorMap& state);

 private:
  // The parameters' gradients; one that the last backward did not reach (released, unused)
  // becomes zeros.
  std::vector<torch::Tensor> Grads();

  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_, exp_avg_, exp_avg_sq_;
  double beta1_, beta2_, eps_, weight_decay_;
  int64_t step_ = 0;
  torch::Tensor fused_step_;  // the fused kernel's step counter (defined: the fused path is used)
};

// diffusers' constant_with_warmup / cosine_with_warmup: lr·step/warmup_steps while warming up
// (step 0 at lr 0), then constant, or cosine decay to 0 at max_steps. `step` is the 0-based
// index of the optimizer step about to run.
double LearningRate(const TrainSpec& spec, int64_t step);

}  // namespace adctl
