#include "worker/dist/gradient_reducer.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>

#if defined(ADCTL_WITH_CUDA)
#include <c10/cuda/CUDAStream.h>

#include "worker/dist/cuda_util.h"
#endif

namespace adctl {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Runs a callback after a leaf's AccumulateGrad node has updated .grad (the same hook point DDP
// uses; the FunctionPostHook interface is identical in LibTorch 1.13 and 2.x).
class GradientReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}

  torch::autograd::variable_list operator()(
      const torch::autograd::variable_list& outputs,
      const torch::autograd::variable_list& /*inputs*/) override {
    on_ready_();
    return outputs;
  }

 private:
  const std::function<void()> on_ready_;
};

std::string Describe(const torch::Tensor& t) {
  std::ostringstream out;
  out << t.sizes() << " " << t.dtype() << " on " << t.device();
  return out.str();
}

}  // namespace

// Measures how long the training stream waits in FinishBackward: a steady clock on CPU, CUDA
// events on the current stream on GPU (the CPU never blocks there, the stream does).
class GradientReducer::ExposedTimer {
 public:
  explicit ExposedTimer(torch::Device device) : device_(device) {
#if defined(ADCTL_WITH_CUDA)
    if (device_.is_cuda()) {
      start_event_ = std::make_unique<cuda::Event>(/*timing=*/true);
      stop_event_ = std::make_unique<cuda::Event>(/*timing=*/true);
    }
#endif
  }

  void Start() {
#if defined(ADCTL_WITH_CUDA)
    if (device_.is_cuda()) {
      ADCTL_CUDA_CHECK(cudaEventRecord(start_event_->get(), CurrentStream()));
      measured_ = true;
      return;
    }
#endif
    start_ = std::chrono::steady_clock::now();
  }

  void Stop() {
#if defined(ADCTL_WITH_CUDA)
    if (device_.is_cuda()) {
      ADCTL_CUDA_CHECK(cudaEventRecord(stop_event_->get(), CurrentStream()));
      return;
    }
#endif
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  double Seconds() const {
#if defined(ADCTL_WITH_CUDA)
    if (device_.is_cuda()) {
      if (!measured_) return 0;
      float milliseconds = 0;
      ADCTL_CUDA_CHECK(cudaEventSynchronize(stop_event_->get()));
      ADCTL_CUDA_CHECK(
          cudaEventElapsedTime(&milliseconds, start_event_->get(), stop_event_->get()));
      return milliseconds / 1000.0;
    }
#endif
    return seconds_;
  }

 private:
#if defined(ADCTL_WITH_CUDA)
  cudaStream_t CurrentStream() const {
    return c10::cuda::getCurrentCUDAStream(device_.index()).stream();
  }
  std::unique_ptr<cuda::Event> start_event_;  // created only for a CUDA device
  std::unique_ptr<cuda::Event> stop_event_;
  bool measured_ = false;
#endif
  const torch::Device device_;
  std::chrono::steady_clock::time_point start_;
  double seconds_ = 0;
};

GradientReducer::GradientReducer(Communicator* comm, std::vector<torch::Tensor> params,
                                 ReducerOptions options)
    : comm_(comm), params_(std::move(params)), options_(options) {
  if (comm_ == nullptr) throw std::invalid_argument("GradientReducer: no communicator");
  if (!(options_.bucket_cap_mb > 0) || !(options_.first_bucket_mb > 0)) {
    throw std::invalid_argument("GradientReducer: bucket_cap_mb and first_bucket_mb must be > 0");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    if (!p.defined() || !p.requires_grad() || !p.is_leaf() || !p.is_contiguous() ||
        p.device() != comm_->device() || !p.is_floating_point()) {
      throw std::invalid_argument(
          "GradientReducer: parameter #" + std::to_string(i) + " (" +
          (p.defined() ? Describe(p) : std::string("undefined")) +
          ") must be a contiguous floating-point leaf with requires_grad on " +
          comm_->device().str());
    }
  }
  timer_ = std::make_unique<ExposedTimer>(comm_->device());

  std::vector<int> reverse_registration(params_.size());
  std::iota(reverse_registration.rbegin(), reverse_registration.rend(), 0);
  BuildBuckets(reverse_registration);

  for (size_t i = 0; i < params_.size(); ++i) {
    // Holding the accumulator keeps it (and so the hook) the one every graph uses for this leaf.
    std::shared_ptr<torch::autograd::Node> accumulator =
        torch::autograd::impl::grad_accumulator(params_[i]);
    const int index = static_cast<int>(i);
    hook_keys_.push_back(accumulator->add_post_hook(
        std::make_unique<GradientReadyHook>([this, index] { OnGradientReady(index); })));
    grad_accumulators_.push_back(std::move(accumulator));
  }
}

GradientReducer::~GradientReducer() {
  for (size_t i = 0; i < grad_accumulators_.size(); ++i) {
    grad_accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
}

void GradientReducer::BuildBuckets(const std::vector<int>& order) {
  const auto bucket_dtype = [this](const torch::Tensor& p) {
    return options_.bf16_buckets ? torch::kBFloat16 : p.scalar_type();
  };
  buckets_.clear();
  slots_.assign(params_.size(), Slot{});
  double cap_bytes = options_.first_bucket_mb * kMiB;
  std::vector<int> members;
  int64_t members_bytes = 0;

  const auto close_bucket = [&] {
    if (members.empty()) return;
    const torch::Tensor& first = params_[members.front()];
    int64_t elements = 0;
    for (int i : members) elements += params_[i].numel();
    Bucket bucket;
    bucket.buffer = torch::zeros(
        {elements}, torch::TensorOptions().dtype(bucket_dtype(first)).device(first.device()));
    bucket.params = members;
    int64_t offset = 0;
    for (int i : members) {
      Slot& slot = slots_[i];
      slot.bucket = static_cast<int>(buckets_.size());
      // detach(): a plain alias, not an autograd view, so optimizers may detach_() the .grad
      // that points here (LibTorch 1.13's zero_grad does).
      slot.view =
          bucket.buffer.narrow(0, offset, params_[i].numel()).view(params_[i].sizes()).detach();
      offset += params_[i].numel();
    }
    buckets_.push_back(std::move(bucket));
    members.clear();
    members_bytes = 0;
    cap_bytes = options_.bucket_cap_mb * kMiB;
  };

  for (int i : order) {
    const torch::Tensor& p = params_[i];
    // One parameter dtype per bucket: BroadcastParameters packs a bucket's parameters together.
    if (!members.empty() && p.scalar_type() != params_[members.front()].scalar_type()) {
      close_bucket();
    }
    members.push_back(i);
    members_bytes += p.numel() * static_cast<int64_t>(c10::elementSize(bucket_dtype(p)));
    if (static_cast<double>(members_bytes) >= cap_bytes) close_bucket();
  }
  close_bucket();
}

void GradientReducer::BroadcastParameters(int root) {
  torch::NoGradGuard no_grad;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Bucket& bucket : buckets_) {
    std::vector<torch::Tensor> flat;
    for (int i : bucket.params) flat.push_back(params_[i].detach().reshape({-1}));
    torch::Tensor packed = torch::cat(flat);
    comm_->Broadcast(packed, root);
    int64_t offset = 0;
    for (int i : bucket.params) {
      const int64_t n = params_[i].numel();
      params_[i].detach().view({-1}).copy_(packed.narrow(0, offset, n));
      offset += n;
    }
  }
}

void GradientReducer::PrepareForBackward(bool sync) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sync_) {
    throw std::logic_error(
        "GradientReducer: PrepareForBackward after a sync backward without FinishBackward");
  }
  sync_ = sync;
  if (!sync) return;
  for (Bucket& bucket : buckets_) bucket.pending = static_cast<int>(bucket.params.size());
  for (Slot& slot : slots_) slot.ready = false;
  next_bucket_ = 0;
  launched_during_backward_ = 0;
}

void GradientReducer::OnGradientReady(int index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sync_) return;  // accumulation micro-step: autograd sums into .grad by itself
  Slot& slot = slots_[index];
  if (slot.ready) {
    throw std::logic_error("GradientReducer: parameter #" + std::to_string(index) +
                           " received its gradient twice in one backward (used in two reentrant "
                           "backward passes?); its bucket may already be on the wire");
  }
  CopyGradientToBucket(index);
  slot.ready = true;
  if (!rebuilt_) arrival_order_.push_back(index);
  if (--buckets_[slot.bucket].pending == 0) LaunchReadyBuckets(/*during_backward=*/true);
}

void GradientReducer::CopyGradientToBucket(int index) {
  torch::NoGradGuard no_grad;
  const torch::Tensor& param = params_[index];
  torch::Tensor& grad = param.mutable_grad();
  torch::Tensor& view = slots_[index].view;
  // The bucket all-reduce averages (ncclAvg; Gloo divides after the sum), so gradients go in
  // as they are: nothing to do when .grad already is the bucket view (every step after the
  // first), one copy (a cast for bf16 buckets) otherwise.
  if (!grad.defined()) {
    view.zero_();  // no gradient on this rank: contributes zero
  } else if (grad.data_ptr() != view.data_ptr() || grad.sizes() != view.sizes() ||
             grad.scalar_type() != view.scalar_type()) {
    view.copy_(grad);
  }
  // fp32 buckets: .grad becomes the bucket view, so the all-reduce result lands in .grad.
  if (view.scalar_type() == param.scalar_type()) grad = view;
}

void GradientReducer::LaunchReadyBuckets(bool during_backward) {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& bucket = buckets_[next_bucket_++];
    bucket.work = comm_->AllReduceAsync(bucket.buffer, ReduceOp::kMean);
    if (during_backward) ++launched_during_backward_;
  }
}

void GradientReducer::FinishBackward() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!sync_) {
    throw std::logic_error("GradientReducer: FinishBackward without PrepareForBackward(true)");
  }
  sync_ = false;  // also when a collective fails below
  // Parameters that produced no gradient in this backward (unused on this rank): their
  // buckets go out now, still in index order.
  for (size_t b = next_bucket_; b < buckets_.size(); ++b) {
    for (int i : buckets_[b].params) {
      if (slots_[i].ready) continue;
      CopyGradientToBucket(i);
      slots_[i].ready = true;
      --buckets_[b].pending;
    }
  }
  LaunchReadyBuckets(/*during_backward=*/false);

  timer_->Start();
  for (Bucket& bucket : buckets_) {
    std::shared_ptr<Work> work = std::move(bucket.work);
    work->Wait();
  }
  timer_->Stop();

  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& grad = params_[i].mutable_grad();
    const torch::Tensor& view = slots_[i].view;
    if (view.scalar_type() == params_[i].scalar_type()) {
      grad = view;  // normally already so
    } else if (grad.defined()) {
      grad.copy_(view);  // bf16 bucket back into the fp32 .grad
    } else {
      grad = view.to(params_[i].scalar_type());
    }
  }
  if (options_.rebuild_buckets && !rebuilt_) {
    lock.unlock();
    RebuildBucketsInArrivalOrder();
  }
}

void GradientReducer::RebuildBucketsInArrivalOrder() {
  std::lock_guard<std::mutex> lock(mu_);
  rebuilt_ = true;
  // Rank 0's order decides, so every rank builds the same buckets.
  std::vector<int64_t> order(arrival_order_.begin(), arrival_order_.end());
  arrival_order_.clear();
  std::vector<bool> seen(params_.size(), false);
  for (int64_t i : order) seen[i] = true;
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {
    if (!seen[i]) order.push_back(i);
  }
  torch::Tensor shared = torch::tensor(order, torch::kLong).to(comm_->device());
  comm_->Broadcast(shared, 0);
  shared = shared.cpu();
  std::vector<int> new_order(params_.size());
  std::vector<int> current_order;
  for (const Bucket& bucket : buckets_) {
    current_order.insert(current_order.end(), bucket.params.begin(), bucket.params.end());
  }
  for (size_t k = 0; k < params_.size(); ++k)
    new_order[k] = static_cast<int>(shared[k].item<int64_t>());
  if (new_order == current_order) return;

  BuildBuckets(new_order);
  // Keep this step's averaged gradients: fp32 .grad pointed into the old buckets.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& grad = params_[i].mutable_grad();
    const torch::Tensor& view = slots_[i].view;
    if (view.scalar_type() != params_[i].scalar_type()) continue;
    view.copy_(grad);
    grad = view;
  }
}

double GradientReducer::last_exposed_allreduce_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timer_->Seconds();
}

int64_t GradientReducer::last_buckets_launched_during_backward() const {
  std::lock_guard<std::mutex> lock(mu_);
  return launched_during_backward_;
}

std::vector<int64_t> GradientReducer::bucket_sizes_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> sizes;
  for (const Bucket& bucket : buckets_) {
    sizes.push_back(bucket.buffer.numel() * static_cast<int64_t>(bucket.buffer.element_size()));
  }
  return sizes;
}

}  // namespace adctl
