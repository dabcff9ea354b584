// One training micro-step (forward, loss, backward) captured once as a CUDA graph and replayed
// for every later micro-step (train.cuda_graphs): thousands of kernel launches become one, which
// is what bounds small batches. The step's inputs are copied into static tensors the graph reads;
// its gradients accumulate into the parameters' persistent .grad tensors as eager backward's do;
// the optimizer, gradient clipping and zeroing run outside the graph (the learning rate changes
// every step).
//
// While a StepGraph exists, the thread's current CUDA stream is a side stream of its own (graphs
// are captured on a non-default stream; the eager steps before the capture run there too, so the
// libraries' per-stream state is made before capture). Only for one rank (no gradient all-reduce
// in the graph).
//
// Each input shape (a shape bucket of the data: worker/data/sampler.h) gets a graph of its own,
// captured after its own warm-up steps, up to kMaxGraphs of them (a micro-step of any other
// shape runs eagerly). The graphs share one memory pool: they replay one after another on one
// stream, and each replay's loss is copied out before the next, so what one leaves behind
// another may reuse.
//
// Available() is false on LibTorch 1.13 and in builds without CUDA; then Run() calls the step
// function directly.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

namespace adctl {

class StepGraph {
 public:
  // (noisy, timesteps, text, target) -> the micro-step's loss after its backward.
  using StepFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                             const torch::Tensor&, const torch::Tensor&)>;

  static bool Available();
  // Why a rank cannot capture its step ("" when it can): it needs a GPU, LibTorch 2.x, and to be
  // the only rank (no gradient all-reduce in the graph).
  static std::string Unavailable(bool cuda, int world_size) {
    if (!cuda || !Available()) return "needs a GPU and LibTorch 2.x";
    return world_size > 1 ? "only for one rank" : "";
  }

  static constexpr int kMaxGraphs = 8;

  // Runs `warmup` eager micro-steps of each shape before capturing it.
  StepGraph(StepFn fn, int warmup);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // The micro-step on these inputs: eagerly while warming up, then captured (and run), then
  // replayed. Returns the loss (a tensor of its own).
  torch::Tensor Run(const torch::Tensor& noisy, const torch::Tensor& timesteps,
                    const torch::Tensor& text, const torch::Tensor& target);
  // Whether a shape has been captured, and how many have.
  bool captured() const;
  int graphs() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace adctl
