// The "nccl" backend of Communicator: CUDA tensors, NCCL on the communicator's own stream.
// Internal to worker/dist (built only with ADCTL_WITH_CUDA); callers use MakeCommunicator.
//
// Each collective is ordered after the caller's current stream (event + cudaStreamWaitEvent),
// runs on one high-priority stream from LibTorch's pool, and Work::Wait orders the caller's
// current stream after it; the CPU blocks only in Barrier. The tensor's memory is marked as used
// by the NCCL stream (recordStream), so the caching allocator never hands it out while the
// collective may still read it.
//
// The communicator is non-blocking (ncclConfig_t.blocking = 0), so initialisation can be
// bounded and aborted. Two watchdog threads check every 100 ms that each collective finished
// within the operation timeout (one retires finished collectives through CUDA events, the other
// compares timestamps only, since CUDA calls can block behind a stuck NCCL kernel) and that NCCL
// reports no asynchronous error; otherwise they print what was stuck, abort the communicator
// (bounded: 10 s) and end the process with kExitTransient (76).
// Thread-safe: collectives are launched under a mutex, in call order.
#pragma once

#include <chrono>
#include <memory>

#include "common/status.h"
#include "worker/dist/communicator.h"
#include "worker/dist/kv_store.h"

namespace adctl {

// Rank 0 publishes the ncclUniqueId under "nccl/unique_id"; every rank joins on the CUDA device
// current at the call (set CUDA_VISIBLE_DEVICES or the current device first).
Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    KeyValueStore* store, int rank, int world_size, std::chrono::steady_clock::time_point deadline,
    std::chrono::milliseconds rendezvous_timeout, std::chrono::milliseconds operation_timeout);

}  // namespace adctl
