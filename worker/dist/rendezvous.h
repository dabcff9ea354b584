// The part of rendezvous both backends share: every rank announces itself in the key-value store
// and waits for all others, so a rank that never comes is named in the error rather than showing
// up as a transport timeout deep inside Gloo or NCCL. Internal to worker/dist. Thread-compatible.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"
#include "worker/dist/kv_store.h"

namespace adctl {

// Sets "<scope>/arrived/<rank>" and waits until every rank of `world_size` has set its key or
// `deadline` passes. On timeout: kDeadlineExceeded, "<scope> rendezvous: ranks 1, 3 of 4 did not
// arrive within 120.0 s (this is rank 0)".
Status AwaitAllRanks(KeyValueStore* store, const std::string& scope, int rank, int world_size,
                     std::chrono::steady_clock::time_point deadline,
                     std::chrono::milliseconds timeout_for_message);

// Time left until `deadline`, at least `floor` (so a last store access still gets a chance).
std::chrono::milliseconds TimeLeft(std::chrono::steady_clock::time_point deadline,
                                   std::chrono::milliseconds floor = std::chrono::milliseconds(1));

}  // namespace adctl
