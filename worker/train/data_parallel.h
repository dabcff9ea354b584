// A training rank's data parallelism (world_size > 1): the rendezvous store (the coordinator's,
// or a directory store in the job folder), the communicator (NCCL on a GPU, Gloo on the CPU) and
// the gradient reducer over the motion modules, which starts every rank from rank 0's weights.
// One rank alone has none of them. Not thread-safe: the training thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/worker_contract.h"
#include "worker/dist/communicator.h"
#include "worker/dist/gradient_reducer.h"
#include "worker/dist/kv_store.h"
#include "worker/train/trainer.h"

namespace adctl {

struct DataParallel {
  // In destruction order from the bottom: the reducer, then the communicator, then the store.
  std::unique_ptr<KeyValueStore> own_store;  // the directory store, when options.store is null
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<GradientReducer> reducer;
};

// Meets the other ranks and sets up `out` when options.world_size > 1 (nothing otherwise);
// `params`: the trainable (name, tensor) pairs the reducer averages the gradients of.
// kExitBadSpec for a build without the backend, kExitTransient for a rendezvous that failed.
std::optional<Failure> ConnectDataParallel(
    const TrainerOptions& options, torch::Device device,
    const std::vector<std::pair<std::string, torch::Tensor>>& params, DataParallel& out);

// Whether `local` holds on any rank (one small all-reduce); every rank gets the same answer.
bool AnyRank(Communicator& comm, bool local);

}  // namespace adctl
