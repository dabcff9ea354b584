// Rendezvous key-value store, scoped to one job attempt.
//
// Ranks publish and fetch small blobs (NCCL unique id, Gloo addresses) through it. The product
// implementation is backed by adctld's WorkerService KV RPCs (worker/report/coordinator_client);
// a directory-backed one serves standalone multi-process runs and tests. Thread-safe.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace adctl {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists or `timeout` passes (kDeadlineExceeded naming the key).
  virtual Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

}  // namespace adctl
