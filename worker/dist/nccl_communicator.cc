#include "worker/dist/nccl_communicator.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "worker/dist/cuda_util.h"
#include "worker/dist/rendezvous.h"

namespace adctl {
namespace {

using Clock = std::chrono::steady_clock;

std::string HexEncode(const char* data, size_t size) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    const auto byte = static_cast<unsigned char>(data[i]);
    out += kHex[byte >> 4];
    out += kHex[byte & 15];
  }
  return out;
}

bool HexDecode(const std::string& hex, char* out, size_t size) {
  if (hex.size() != 2 * size) return false;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < size; ++i) {
    const int high = nibble(hex[2 * i]);
    const int low = nibble(hex[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<char>(high * 16 + low);
  }
  return true;
}

ncclDataType_t NcclType(c10::ScalarType type) {
  switch (type) {
    case torch::kFloat:
      return ncclFloat32;
    case torch::kDouble:
      return ncclFloat64;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kHalf:
      return ncclFloat16;
    case torch::kInt:
      return ncclInt32;
    case torch::kLong:
      return ncclInt64;
    case torch::kByte:
      return ncclUint8;
    default:
      throw std::invalid_argument(std::string("nccl: unsupported dtype ") + c10::toString(type));
  }
}

// A non-blocking communicator's calls may return ncclInProgress; poll until the call finished,
// failed, or `deadline` passed (then ncclInProgress is returned).
ncclResult_t AwaitNccl(ncclComm_t comm, ncclResult_t launched, Clock::time_point deadline) {
  if (launched != ncclInProgress) return launched;
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    if (query != ncclSuccess) return query;
    if (state != ncclInProgress) return state;
    if (Clock::now() >= deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Set once by whoever sees the communicator fail; read by every Work.
struct Health {
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string message;  // guarded by mu

  void Fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!failed.exchange(true)) message = why;
  }
  void ThrowIfFailed() {
    if (!failed.load()) return;
    std::lock_guard<std::mutex> lock(mu);
    throw CommunicationError(message);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Health> health, std::shared_ptr<cuda::Event> done, int device)
      : health_(std::move(health)), done_(std::move(done)), device_(device) {}

  void Wait() override {
    health_->ThrowIfFailed();
    const cudaStream_t current =
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream();
    ADCTL_CUDA_CHECK(cudaStreamWaitEvent(current, done_->get(), 0));
  }

 private:
  const std::shared_ptr<Health> health_;
  const std::shared_ptr<cuda::Event> done_;
  const int device_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world_size, int device,
                   std::chrono::milliseconds timeout)
      : comm_(comm),
        rank_(rank),
        world_size_(world_size),
        device_(device),
        timeout_(timeout),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true,
                                             static_cast<c10::DeviceIndex>(device))),
        health_(std::make_shared<Health>()),
        poller_([this] { PollLoop(); }),
        monitor_([this] { MonitorLoop(); }) {}

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(pending_mu_);
      stopping_ = true;
    }
    pending_cv_.notify_all();
    poller_.join();
    monitor_.join();
    if (health_->failed.load()) {
      ncclCommAbort(comm_);
      return;
    }
    // Flush what was issued, bounded; a peer that is gone makes us abort instead.
    const ncclResult_t finalized =
        AwaitNccl(comm_, ncclCommFinalize(comm_), Clock::now() + timeout_);
    if (finalized == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  torch::Device device() const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device_));
  }
  const char* backend() const override { return "nccl"; }

  std::shared_ptr<Work> AllReduceAsync(torch::Tensor t, ReduceOp op) override {
    CheckTensor(t, "AllReduceAsync");
    CheckReduceOp(t, op);
    const ncclDataType_t type = NcclType(t.scalar_type());
    const ncclRedOp_t nccl_op = op == ReduceOp::kMean ? ncclAvg : ncclSum;
    return Launch("all-reduce", t, [&](cudaStream_t stream) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type,
                           nccl_op, comm_, stream);
    });
  }

  void Broadcast(torch::Tensor t, int root) override {
    CheckTensor(t, "Broadcast");
    if (root < 0 || root >= world_size_) {
      throw std::invalid_argument("nccl Broadcast: root " + std::to_string(root) +
                                  " is not a rank of " + std::to_string(world_size_));
    }
    Launch("broadcast", t, [&](cudaStream_t stream) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(),
                           static_cast<size_t>(t.numel()) * t.element_size(), ncclUint8, root,
                           comm_, stream);
    })->Wait();
  }

  void Barrier() override {
    auto token = torch::zeros({1}, torch::TensorOptions().dtype(torch::kInt).device(device()));
    std::shared_ptr<cuda::Event> done;
    Launch(
        "barrier", token,
        [&](cudaStream_t stream) {
          return ncclAllReduce(token.data_ptr(), token.data_ptr(), 1, ncclInt32, ncclSum, comm_,
                               stream);
        },
        &done);
    // Blocks the CPU; a peer that never comes is caught by the watchdog.
    ADCTL_CUDA_CHECK(cudaEventSynchronize(done->get()));
    health_->ThrowIfFailed();
  }

 private:
  struct Pending {
    std::shared_ptr<cuda::Event> done;  // null until the NCCL call returned
    Clock::time_point launched;
    uint64_t sequence = 0;
    const char* operation = "";
    int64_t bytes = 0;
  };

  void CheckTensor(const torch::Tensor& t, const char* what) const {
    if (!t.defined() || !t.is_cuda() || t.device().index() != device_ || !t.is_contiguous()) {
      throw std::invalid_argument(
          std::string("nccl ") + what +
          ": the tensor must be a defined, contiguous tensor on cuda:" + std::to_string(device_));
    }
  }

  template <typename Call>
  std::shared_ptr<Work> Launch(const char* operation, const torch::Tensor& t, Call&& call,
                               std::shared_ptr<cuda::Event>* done_out = nullptr) {
    std::lock_guard<std::mutex> lock(launch_mu_);
    health_->ThrowIfFailed();
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    const cudaStream_t current =
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream();
    // The collective starts after everything queued so far on the caller's stream.
    ADCTL_CUDA_CHECK(cudaEventRecord(ready_.get(), current));
    ADCTL_CUDA_CHECK(cudaStreamWaitEvent(stream_.stream(), ready_.get(), 0));
    // Watched from before the NCCL call, in case the call itself never returns.
    const uint64_t sequence = Watch(operation, t.numel() * static_cast<int64_t>(t.element_size()));
    const ncclResult_t result = AwaitNccl(comm_, call(stream_.stream()), Clock::now() + timeout_);
    if (result != ncclSuccess) {
      const std::string why =
          std::string("nccl ") + operation + " on rank " + std::to_string(rank_) + " of " +
          std::to_string(world_size_) + " failed to launch: " +
          (result == ncclInProgress ? std::string("still in progress after the timeout")
                                    : ncclGetErrorString(result));
      health_->Fail(why);
      throw CommunicationError(why);
    }
    c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    auto done = std::make_shared<cuda::Event>();
    ADCTL_CUDA_CHECK(cudaEventRecord(done->get(), stream_.stream()));
    {
      std::lock_guard<std::mutex> pending_lock(pending_mu_);
      for (Pending& pending : pending_) {
        if (pending.sequence == sequence) pending.done = done;
      }
    }
    if (done_out) *done_out = done;
    return std::make_shared<NcclWork>(health_, std::move(done), device_);
  }

  // Registers a collective with the watchdog; returns its sequence number.
  uint64_t Watch(const char* operation, int64_t bytes) {
    std::lock_guard<std::mutex> lock(pending_mu_);
    pending_.push_back(Pending{nullptr, Clock::now(), next_sequence_, operation, bytes});
    return next_sequence_++;
  }

  // Watchdog, part 1: retires finished collectives and watches for NCCL's asynchronous errors.
  // Its CUDA calls can block for as long as another thread sits in the driver (a kernel launch
  // behind a stuck NCCL kernel does), so it never holds pending_mu_ while calling CUDA, and the
  // timeout is decided by MonitorLoop, which makes no CUDA calls at all.
  void PollLoop() {
    ADCTL_CUDA_CHECK(cudaSetDevice(device_));
    bool pause = true;
    while (true) {
      std::shared_ptr<cuda::Event> oldest;
      {
        std::unique_lock<std::mutex> lock(pending_mu_);
        if (pause) pending_cv_.wait_for(lock, std::chrono::milliseconds(100));
        if (stopping_) return;
        if (!pending_.empty()) oldest = pending_.front().done;
      }
      pause = true;
      // From here on unlocked: every CUDA call below, event destruction included.
      if (oldest) {
        const cudaError_t state = cudaEventQuery(oldest->get());
        if (state == cudaSuccess) {
          Pending retired;
          {
            std::lock_guard<std::mutex> lock(pending_mu_);
            if (!pending_.empty() && pending_.front().done == oldest) {
              retired = std::move(pending_.front());
              pending_.pop_front();
            }
          }
          pause = false;  // look at the next one at once
          continue;
        }
        if (state != cudaErrorNotReady) {
          cuda::DieOnCudaError(state, "cudaEventQuery (nccl watchdog)", __FILE__, __LINE__);
        }
      }
      ncclResult_t async_error = ncclSuccess;
      const ncclResult_t query = ncclCommGetAsyncError(comm_, &async_error);
      if (query != ncclSuccess) async_error = query;
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        Abort(std::string("NCCL reported an asynchronous error: ") +
              ncclGetErrorString(async_error));
      }
    }
  }

  // Watchdog, part 2: ends the process when the oldest unfinished collective is older than the
  // operation timeout. Timestamps only, no CUDA calls, so nothing can keep it from firing.
  void MonitorLoop() {
    std::unique_lock<std::mutex> lock(pending_mu_);
    while (!stopping_) {
      pending_cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (pending_.empty()) continue;
      const Pending& oldest = pending_.front();
      if (Clock::now() - oldest.launched > timeout_) {
        const std::string why = std::string(oldest.operation) + " #" +
                                std::to_string(oldest.sequence) + " (" +
                                std::to_string(oldest.bytes) + " bytes) did not finish within " +
                                std::to_string(timeout_.count() / 1000.0) +
                                " s: a peer rank died or stopped calling collectives";
        lock.unlock();
        Abort(why);
      }
    }
  }

  // Says why, then aborts the communicator (bounded: ncclCommAbort itself can hang on a wedged
  // device) and ends the process.
  [[noreturn]] void Abort(const std::string& why) {
    const std::string message = "nccl watchdog, rank " + std::to_string(rank_) + " of " +
                                std::to_string(world_size_) + ": " + why +
                                "; aborting the communicator and exiting with code " +
                                std::to_string(kExitTransient);
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    health_->Fail(message);
    auto aborted = std::make_shared<std::atomic<bool>>(false);
    std::thread([comm = comm_, aborted] {
      ncclCommAbort(comm);
      aborted->store(true);
    }).detach();
    for (int i = 0; i < 100 && !aborted->load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::_Exit(kExitTransient);
  }

  // Constant after construction.
  const ncclComm_t comm_;
  const int rank_;
  const int world_size_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  const c10::cuda::CUDAStream stream_;
  const std::shared_ptr<Health> health_;

  std::mutex launch_mu_;  // serialises launches (the NCCL call order is the collective order)
  cuda::Event ready_;     // guarded by launch_mu_

  std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  std::deque<Pending> pending_;  // guarded by pending_mu_; in launch order
  uint64_t next_sequence_ = 0;   // guarded by pending_mu_
  bool stopping_ = false;        // guarded by pending_mu_

  // Last: they start after every member above exists.
  std::thread poller_;   // PollLoop
  std::thread monitor_;  // MonitorLoop
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    KeyValueStore* store, int rank, int world_size, Clock::time_point deadline,
    std::chrono::milliseconds rendezvous_timeout, std::chrono::milliseconds operation_timeout) {
  const int device = c10::cuda::current_device();
  ADCTL_RETURN_IF_ERROR(
      AwaitAllRanks(store, "nccl", rank, world_size, deadline, rendezvous_timeout));

  ncclUniqueId id;
  const std::string key = "nccl/unique_id";
  if (rank == 0) {
    ADCTL_RETURN_IF_ERROR(ADCTL_NCCL_STATUS(ncclGetUniqueId(&id)));
    ADCTL_RETURN_IF_ERROR(store->Set(key, HexEncode(id.internal, sizeof(id.internal))));
  } else {
    Result<std::string> hex = store->Get(key, TimeLeft(deadline));
    if (!hex.ok()) {
      return Status(hex.status().code(),
                    "nccl rendezvous (rank " + std::to_string(rank) +
                        "): rank 0 did not publish the NCCL id: " + hex.status().message());
    }
    if (!HexDecode(*hex, id.internal, sizeof(id.internal))) {
      return DataLoss("nccl rendezvous: the NCCL id under '" + key + "' is malformed");
    }
  }

  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing peer makes init time out rather than hang
  ncclComm_t comm = nullptr;
  const ncclResult_t launched = ncclCommInitRankConfig(&comm, world_size, id, rank, &config);
  if (launched != ncclSuccess && launched != ncclInProgress) {
    return ADCTL_NCCL_STATUS(launched);
  }
  const ncclResult_t joined = AwaitNccl(comm, launched, deadline);
  if (joined != ncclSuccess) {
    ncclCommAbort(comm);
    if (joined == ncclInProgress) {
      return Status(StatusCode::kDeadlineExceeded,
                    "nccl rendezvous: rank " + std::to_string(rank) + " of " +
                        std::to_string(world_size) +
                        ": the NCCL communicator was not complete by the rendezvous deadline "
                        "(a peer died after arriving?)");
    }
    return Unavailable("nccl rendezvous: rank " + std::to_string(rank) + " of " +
                       std::to_string(world_size) +
                       ": ncclCommInitRankConfig failed: " + ncclGetErrorString(joined));
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<NcclCommunicator>(comm, rank, world_size, device, operation_timeout));
}

}  // namespace adctl
