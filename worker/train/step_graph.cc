#include "worker/train/step_graph.h"

#include <torch/version.h>

#include <optional>
#include <utility>

#if defined(ADCTL_WITH_CUDA) && TORCH_VERSION_MAJOR >= 2
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#define ADCTL_HAVE_CUDA_GRAPHS 1
#endif

namespace adctl {

#if defined(ADCTL_HAVE_CUDA_GRAPHS)

namespace {

// A stream of the pool, after everything queued so far has run (pool streams do not wait for
// the default stream).
c10::cuda::CUDAStream SideStream() {
  torch::cuda::synchronize();
  return c10::cuda::getStreamFromPool();
}

}  // namespace

struct StepGraph::Impl {
  Impl(StepFn f, int w) : fn(std::move(f)), warmup(w), guard(SideStream()) {}

  StepFn fn;
  int warmup;
  c10::cuda::CUDAStreamGuard guard;  // the side stream, current while this exists
  std::optional<at::cuda::CUDAGraph> graph;
  torch::Tensor noisy, timesteps, text, target, loss;  // the graph's inputs and output

  bool Fits(const torch::Tensor& n, const torch::Tensor& t, const torch::Tensor& x,
            const torch::Tensor& y) const {
    return n.sizes() == noisy.sizes() && t.sizes() == timesteps.sizes() &&
           x.sizes() == text.sizes() && y.sizes() == target.sizes() &&
           n.scalar_type() == noisy.scalar_type() && x.scalar_type() == text.scalar_type();
  }
};

bool StepGraph::Available() { return torch::cuda::is_available(); }

StepGraph::StepGraph(StepFn fn, int warmup)
    : impl_(std::make_unique<Impl>(std::move(fn), warmup)) {}

StepGraph::~StepGraph() = default;

bool StepGraph::captured() const { return impl_->graph.has_value(); }

torch::Tensor StepGraph::Run(const torch::Tensor& noisy, const torch::Tensor& timesteps,
                             const torch::Tensor& text, const torch::Tensor& target) {
  Impl& g = *impl_;
  if (g.graph) {
    if (!g.Fits(noisy, timesteps, text, target)) {
      return g.fn(noisy, timesteps, text, target).detach();
    }
    g.noisy.copy_(noisy);
    g.timesteps.copy_(timesteps);
    g.text.copy_(text);
    g.target.copy_(target);
    g.graph->replay();
    return g.loss.clone();
  }
  if (g.warmup > 0) {
    --g.warmup;
    return g.fn(noisy, timesteps, text, target).detach();
  }
  // Capture. Nothing else may run on the device meanwhile, and the capture runs nothing: the
  // first replay does this micro-step's work.
  g.noisy = noisy.clone();
  g.timesteps = timesteps.clone();
  g.text = text.clone();
  g.target = target.clone();
  torch::cuda::synchronize();
  g.graph.emplace();
  // Thread-local capture: only this thread's unsafe calls (a synchronizing copy, say) break
  // it. The data loader's thread goes on pinning host memory meanwhile, which a global-mode
  // capture would count against the graph; the autograd engine's device thread launches its
  // kernels into the capturing stream as usual.
  g.graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  g.loss = g.fn(g.noisy, g.timesteps, g.text, g.target).detach();
  g.graph->capture_end();
  g.graph->replay();
  return g.loss.clone();
}

#else

struct StepGraph::Impl {
  StepFn fn;
};

bool StepGraph::Available() { return false; }

StepGraph::StepGraph(StepFn fn, int) : impl_(std::make_unique<Impl>(Impl{std::move(fn)})) {}

StepGraph::~StepGraph() = default;

bool StepGraph::captured() const { return false; }

torch::Tensor StepGraph::Run(const torch::Tensor& noisy, const torch::Tensor& timesteps,
                             const torch::Tensor& text, const torch::Tensor& target) {
  return impl_->fn(noisy, timesteps, text, target).detach();
}

#endif

}  // namespace adctl
