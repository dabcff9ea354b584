#include "worker/train/step_graph.h"

#include <torch/version.h>

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

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

// One input shape's graph: its static inputs and output, or the eager steps still to run.
struct ShapeGraph {
  std::vector<int64_t> key;  // the inputs' sizes and dtypes
  int warmup = 0;
  std::unique_ptr<at::cuda::CUDAGraph> graph;  // not movable itself
  torch::Tensor noisy, timesteps, text, target, loss;
};

std::vector<int64_t> ShapeKey(const torch::Tensor& n, const torch::Tensor& t,
                              const torch::Tensor& x, const torch::Tensor& y) {
  std::vector<int64_t> key;
  for (const torch::Tensor* tensor : {&n, &t, &x, &y}) {
    key.push_back(static_cast<int64_t>(tensor->scalar_type()));
    key.push_back(tensor->dim());
    for (int64_t size : tensor->sizes()) key.push_back(size);
  }
  return key;
}

}  // namespace

struct StepGraph::Impl {
  Impl(StepFn f, int w) : fn(std::move(f)), warmup(w), guard(SideStream()) {}

  StepFn fn;
  int warmup;
  c10::cuda::CUDAStreamGuard guard;  // the side stream, current while this exists
  std::vector<ShapeGraph> shapes;
};

bool StepGraph::Available() { return torch::cuda::is_available(); }

StepGraph::StepGraph(StepFn fn, int warmup)
    : impl_(std::make_unique<Impl>(std::move(fn), warmup)) {}

StepGraph::~StepGraph() = default;

bool StepGraph::captured() const { return graphs() > 0; }

int StepGraph::graphs() const {
  int n = 0;
  for (const ShapeGraph& s : impl_->shapes) n += s.graph != nullptr ? 1 : 0;
  return n;
}

torch::Tensor StepGraph::Run(const torch::Tensor& noisy, const torch::Tensor& timesteps,
                             const torch::Tensor& text, const torch::Tensor& target) {
  Impl& g = *impl_;
  const std::vector<int64_t> key = ShapeKey(noisy, timesteps, text, target);
  auto it = std::find_if(g.shapes.begin(), g.shapes.end(),
                         [&](const ShapeGraph& s) { return s.key == key; });
  if (it == g.shapes.end()) {
    if (static_cast<int>(g.shapes.size()) >= kMaxGraphs) {
      return g.fn(noisy, timesteps, text, target).detach();
    }
    g.shapes.push_back(ShapeGraph{key, g.warmup, nullptr, {}, {}, {}, {}, {}});
    it = g.shapes.end() - 1;
  }
  ShapeGraph& s = *it;
  if (s.graph) {
    s.noisy.copy_(noisy);
    s.timesteps.copy_(timesteps);
    s.text.copy_(text);
    s.target.copy_(target);
    s.graph->replay();
    return s.loss.clone();
  }
  if (s.warmup > 0) {
    --s.warmup;
    return g.fn(noisy, timesteps, text, target).detach();
  }
  // Capture. Nothing else may run on the device meanwhile, and the capture runs nothing: the
  // first replay does this micro-step's work.
  s.noisy = noisy.clone();
  s.timesteps = timesteps.clone();
  s.text = text.clone();
  s.target = target.clone();
  torch::cuda::synchronize();
  // The first graph's memory pool, shared by the later ones (the file comment).
  decltype(s.graph->pool()) pool{0, 0};
  for (ShapeGraph& other : g.shapes) {  // pool() is not const in every LibTorch
    if (other.graph) {
      pool = other.graph->pool();
      break;
    }
  }
  s.graph = std::make_unique<at::cuda::CUDAGraph>();
  // Thread-local capture: only this thread's unsafe calls (a synchronizing copy, say) break
  // it. The data loader's thread goes on pinning host memory meanwhile, which a global-mode
  // capture would count against the graph; the autograd engine's device thread launches its
  // kernels into the capturing stream as usual.
  s.graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
  s.loss = g.fn(s.noisy, s.timesteps, s.text, s.target).detach();
  s.graph->capture_end();
  s.graph->replay();
  return s.loss.clone();
}

#else

struct StepGraph::Impl {
  StepFn fn;
};

bool StepGraph::Available() { return false; }

StepGraph::StepGraph(StepFn fn, int) : impl_(std::make_unique<Impl>(Impl{std::move(fn)})) {}

StepGraph::~StepGraph() = default;

bool StepGraph::captured() const { return false; }

int StepGraph::graphs() const { return 0; }

torch::Tensor StepGraph::Run(const torch::Tensor& noisy, const torch::Tensor& timesteps,
                             const torch::Tensor& text, const torch::Tensor& target) {
  return impl_->fn(noisy, timesteps, text, target).detach();
}

#endif

}  // namespace adctl
