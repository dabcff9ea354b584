// Data-parallel gradient averaging overlapped with backward, like PyTorch DDP's Reducer
// (torch/csrc/distributed/c10d/reducer.cpp).
//
// The trainable parameters are grouped into flat buckets in REVERSE registration order (the
// order backward produces their gradients); the first bucket is small (first_bucket_mb) so
// communication starts early, the others hold up to bucket_cap_mb. A hook on each parameter's
// gradient accumulator fires once the parameter's .grad is final for this backward; when every
// parameter of a bucket has fired, and every earlier bucket has been launched, the bucket is
// all-reduced asynchronously while backward goes on. Buckets launch in index order on every rank,
// so ranks issue identical collective sequences. After the first synchronizing backward the
// buckets are rebuilt once in the order the gradients actually arrived on rank 0 (as DDP does).
//
// Gradient accumulation: on micro-steps with sync=false the hooks do nothing, autograd sums into
// .grad as usual. On the sync micro-step the accumulated .grad (the sum over all micro-steps) is
// in the bucket (it is a view into it, or the hook copies it there), and the bucket is
// all-reduced with ReduceOp::kMean (NCCL: ncclAvg, which scales by 1/world_size inside the
// reduction kernel, so no extra pass over the gradients), so the final .grad is (sum over
// micro-steps) averaged over ranks: N ranks with batch b equal 1 rank with batch N*b (loss scaled
// by 1/accumulation steps as usual).
//
// Memory: with fp32 buckets each parameter's .grad becomes a view into its bucket (as DDP's
// gradient_as_bucket_view), so the buckets cost no memory beyond the gradients themselves and
// the averaged result lands in .grad without a copy. With bf16 buckets (half the traffic, about
// 3 significant digits) .grad stays fp32 and the reduced bucket is copied back into it.
//
// A parameter that got no gradient in a sync backward (unused on this rank) contributes zeros
// (its accumulated .grad, if any). Parameters must be contiguous leaves with requires_grad,
// all on the communicator's device; dtypes may differ (buckets split at a change).
//
// Thread-safety: the hooks run on autograd's threads; call the methods from the training thread,
// never during backward. One reducer per parameter set.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "worker/dist/communicator.h"

namespace adctl {

struct ReducerOptions {
  double bucket_cap_mb = 25;    // job spec train.bucket_cap_mb; MiB of bucket dtype
  double first_bucket_mb = 1;   // the first bucket (last layers' gradients) starts early
  bool bf16_buckets = false;    // job spec train.bucket_dtype == "bf16"
  bool rebuild_buckets = true;  // once, after the first sync backward, in arrival order
};

class GradientReducer {
 public:
  // `params`: the trainable parameters in registration (module) order, the same on every rank.
  // Throws std::invalid_argument on a parameter it cannot reduce.
  GradientReducer(Communicator* comm, std::vector<torch::Tensor> params, ReducerOptions options);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Copies rank `root`'s parameter values to every rank (call once before training, after
  // loading or restoring weights, so all ranks start equal). Collective.
  void BroadcastParameters(int root = 0);

  // Before each micro-step's backward. sync=false on gradient-accumulation micro-steps (no
  // communication), true on the last micro-step of an optimizer step.
  void PrepareForBackward(bool sync);

  // After backward of a sync micro-step: launches any bucket still waiting (unused parameters),
  // waits for all buckets, and leaves the gradients averaged over ranks in each param.grad().
  // NCCL: the caller's current stream is ordered after the all-reduces; the CPU does not block.
  // Throws CommunicationError when a collective failed.
  void FinishBackward();

  // Time the last FinishBackward waited for all-reduces that backward had not hidden (the
  // "exposed" all-reduce time). CUDA: measured with events on the current stream; reading it
  // waits for the GPU to reach the end of FinishBackward, so read it where the step synchronizes
  // anyway (after loss.item()).
  double last_exposed_allreduce_seconds() const;
  // Buckets whose all-reduce started during the last sync backward (the rest started in
  // FinishBackward); equal to the bucket count when communication overlaps fully.
  int64_t last_buckets_launched_during_backward() const;
  // Byte size of each bucket, in launch order.
  std::vector<int64_t> bucket_sizes_bytes() const;

 private:
  struct Bucket {
    torch::Tensor buffer;        // flat, bucket dtype, on the parameters' device
    std::vector<int> params;     // indices into params_
    int pending = 0;             // parameters not yet ready in this sync backward
    std::shared_ptr<Work> work;  // the launched all-reduce, until FinishBackward
  };
  struct Slot {  // where one parameter lives in the buckets
    int bucket = -1;
    torch::Tensor view;  // view of the bucket buffer shaped like the parameter
    bool ready = false;  // its gradient is in the bucket (this sync backward)
  };
  class ExposedTimer;  // CPU clock or CUDA events (gradient_reducer.cc)

  void BuildBuckets(const std::vector<int>& order);
  void OnGradientReady(int index);                // hook body
  void CopyGradientToBucket(int index);           // requires mu_
  void LaunchReadyBuckets(bool during_backward);  // requires mu_
  void RebuildBucketsInArrivalOrder();

  // Constant after construction.
  Communicator* const comm_;
  const std::vector<torch::Tensor> params_;
  const ReducerOptions options_;
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;  // keeps hooks alive
  std::vector<uintptr_t> hook_keys_;
  std::unique_ptr<ExposedTimer> timer_;

  // Changed by hooks (autograd threads) and by the methods above (training thread, never
  // while backward runs).
  mutable std::mutex mu_;
  std::vector<Bucket> buckets_;           // guarded by mu_
  std::vector<Slot> slots_;               // guarded by mu_; one per parameter
  bool sync_ = false;                     // guarded by mu_
  size_t next_bucket_ = 0;                // guarded by mu_; the next bucket to launch
  int64_t launched_during_backward_ = 0;  // guarded by mu_
  bool rebuilt_ = false;                  // guarded by mu_
  std::vector<int> arrival_order_;        // guarded by mu_; recorded until the rebuild
};

}  // namespace adctl
