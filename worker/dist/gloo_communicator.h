// The "gloo" backend of Communicator: CPU tensors over Gloo's TCP transport. Internal to
// worker/dist; callers use MakeCommunicator (communicator.h).
//
// Gloo's collectives are blocking, so each one runs on a dedicated communication thread in the
// order it was submitted; a failure marks the communicator broken and fails every later
// collective with the first cause. Thread-safe.
#pragma once

#include <chrono>
#include <memory>

#include "common/status.h"
#include "worker/dist/communicator.h"
#include "worker/dist/kv_store.h"

namespace adctl {

// Exchanges TCP addresses through `store` under "gloo/" and connects every pair of ranks.
Result<std::unique_ptr<Communicator>> MakeGlooCommunicator(
    KeyValueStore* store, int rank, int world_size, std::chrono::steady_clock::time_point deadline,
    std::chrono::milliseconds rendezvous_timeout, std::chrono::milliseconds operation_timeout);

}  // namespace adctl
