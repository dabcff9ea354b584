#include "worker/dist/communicator.h"

#if defined(ADCTL_WITH_GLOO)
#include "worker/dist/gloo_communicator.h"
#endif
#if defined(ADCTL_WITH_NCCL)
#include "worker/dist/nccl_communicator.h"
#endif

namespace adctl {

Result<std::unique_ptr<Communicator>> MakeCommunicator(
    const std::string& backend, KeyValueStore* store, int rank, int world_size,
    std::chrono::milliseconds rendezvous_timeout, std::chrono::milliseconds operation_timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgument("communicator: rank " + std::to_string(rank) +
                           " is not within a world of " + std::to_string(world_size));
  }
  if (store == nullptr) return InvalidArgument("communicator: no rendezvous store");
  const auto deadline = std::chrono::steady_clock::now() + rendezvous_timeout;
  if (backend == "gloo") {
#if defined(ADCTL_WITH_GLOO)
    return MakeGlooCommunicator(store, rank, world_size, deadline, rendezvous_timeout,
                                operation_timeout);
#else
    return InvalidArgument("communicator: this adworker was built without Gloo (libgloo-dev)");
#endif
  }
  if (backend == "nccl") {
#if defined(ADCTL_WITH_NCCL)
    return MakeNcclCommunicator(store, rank, world_size, deadline, rendezvous_timeout,
                                operation_timeout);
#else
    return InvalidArgument(
        "communicator: backend 'nccl' needs a CUDA build (ADCTL_WITH_CUDA); this one is CPU-only");
#endif
  }
  return InvalidArgument("communicator: unknown backend '" + backend +
                         "' (expected 'gloo' or 'nccl')");
}

void CheckReduceOp(const torch::Tensor& t, ReduceOp op) {
  if (op == ReduceOp::kMean && !t.is_floating_point()) {
    throw std::invalid_argument(std::string("all-reduce mean of a ") +
                                c10::toString(t.scalar_type()) +
                                " tensor: only floating-point tensors can be averaged");
  }
}

double AllReduceMean(Communicator* comm, double value) {
  torch::Tensor t =
      torch::full({1}, value, torch::TensorOptions().dtype(torch::kDouble).device(comm->device()));
  comm->AllReduceSumAsync(t)->Wait();
  return t.item<double>() / comm->world_size();
}

}  // namespace adctl
