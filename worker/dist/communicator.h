// Collective communication among the ranks of one job attempt.
//
// One interface, two backends:
//   "gloo"  CPU tensors, Gloo over TCP (Debian libgloo). Collectives run in submission order on
//           one dedicated communication thread, so AllReduceSumAsync returns at once and overlaps
//           with whatever the caller does next.
//   "nccl"  CUDA tensors (only when built with ADCTL_WITH_CUDA). Collectives run on the
//           communicator's own high-priority stream, ordered after the caller's current stream;
//           a watchdog thread ends the process with kExitTransient (76) when one does not finish
//           within the operation timeout (a peer died or hung), since a device stream blocked
//           in NCCL cannot be recovered in-process.
//
// Both rendezvous through a KeyValueStore scoped to the job attempt: every rank announces itself
// under "<backend>/arrived/<rank>", so a rank that never comes is named in the error; then Gloo
// exchanges its TCP addresses and NCCL's rank 0 publishes the ncclUniqueId.
//
// Ordering contract (as for any collective library): every rank issues the same collectives in
// the same order. Thread-safety: a Communicator may be called from several threads (the gradient
// reducer calls AllReduceAsync from autograd's thread), but the caller must then order the
// calls identically on every rank; Work objects may be waited on from any thread.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/status.h"
#include "worker/dist/kv_store.h"

namespace adctl {

// A collective failed: a peer closed its connection, or the operation timed out. The message
// names the backend, the operation, this rank and the cause. The training loop turns it into
// exit code kExitTransient (76, retryable).
class CommunicationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What an all-reduce computes: the sum, or the mean (the sum divided by the number of ranks,
// for floating-point tensors only; NCCL's ncclAvg, in the same kernel as the reduction).
enum class ReduceOp { kSum, kMean };

// Completion handle of an asynchronous collective.
class Work {
 public:
  virtual ~Work() = default;
  // Gloo: blocks until the collective finished; the tensor holds the result.
  // NCCL: orders the caller's current CUDA stream after the collective (the CPU does not block);
  // work queued on that stream afterwards sees the result.
  // Throws CommunicationError if the collective failed.
  virtual void Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Where this communicator's tensors must live: CPU (gloo) or the CUDA device that was current
  // when it was made (nccl).
  virtual torch::Device device() const = 0;
  virtual const char* backend() const = 0;

  // Reduces `t` over all ranks with `op`, in place. `t` must be contiguous and on device(); it
  // is kept alive until the collective has finished. Supported dtypes: float32, float64,
  // bfloat16, float16, int32, int64, uint8 (kMean: the floating-point ones).
  virtual std::shared_ptr<Work> AllReduceAsync(torch::Tensor t, ReduceOp op) = 0;
  std::shared_ptr<Work> AllReduceSumAsync(torch::Tensor t) {
    return AllReduceAsync(std::move(t), ReduceOp::kSum);
  }
  // Copies `t` of rank `root` into `t` of every rank (any dtype, contiguous). Returns when the
  // result is visible to the caller (Gloo: in memory; NCCL: on the caller's current stream).
  // Throws CommunicationError on failure.
  virtual void Broadcast(torch::Tensor t, int root) = 0;
  // Returns once every rank has entered the barrier (blocks the CPU on both backends). Throws
  // CommunicationError on failure.
  virtual void Barrier() = 0;
};

// Throws std::invalid_argument for kMean on a non-floating-point tensor (for the backends).
void CheckReduceOp(const torch::Tensor& t, ReduceOp op);

// Makes a communicator of `backend` ("gloo" or "nccl") for `rank` of `world_size`.
//
// `rendezvous_timeout` bounds the whole rendezvous: when a rank has not arrived by then the
// result is kDeadlineExceeded naming the missing ranks ("ranks 1, 3 of 4 did not arrive within
// 120 s"). `operation_timeout` bounds each collective afterwards; it must cover the longest time
// one rank can spend outside collectives while another already waits in one (e.g. rank 0 writing
// a checkpoint). Other failures: kInvalidArgument (unknown backend, nccl in a CPU-only build, bad
// rank), kUnavailable (transport errors).
//
// Environment: ADCTL_GLOO_HOST (address this rank listens on, default 127.0.0.1; set it to the
// host's address when Gloo ranks span machines) or ADCTL_GLOO_IFNAME (a network interface name).
Result<std::unique_ptr<Communicator>> MakeCommunicator(
    const std::string& backend, KeyValueStore* store, int rank, int world_size,
    std::chrono::milliseconds rendezvous_timeout,
    std::chrono::milliseconds operation_timeout = std::chrono::minutes(5));

// The mean of `value` over all ranks (e.g. the step's loss), through a one-element float64
// all-reduce on comm->device(). Blocks the CPU until the result is known. Throws
// CommunicationError on failure.
double AllReduceMean(Communicator* comm, double value);

}  // namespace adctl
