#include "worker/dist/rendezvous.h"

#include <cstdio>
#include <vector>

namespace adctl {

std::chrono::milliseconds TimeLeft(std::chrono::steady_clock::time_point deadline,
                                   std::chrono::milliseconds floor) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return std::max(left, floor);
}

Status AwaitAllRanks(KeyValueStore* store, const std::string& scope, int rank, int world_size,
                     std::chrono::steady_clock::time_point deadline,
                     std::chrono::milliseconds timeout_for_message) {
  const auto key = [&](int r) { return scope + "/arrived/" + std::to_string(r); };
  Status set = store->Set(key(rank), "1");
  if (!set.ok()) {
    return Status(set.code(), scope + " rendezvous (rank " + std::to_string(rank) +
                                  "): cannot announce this rank: " + set.message());
  }
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    if (r == rank) continue;
    // Once one rank is late the deadline has passed: probe the rest without waiting.
    const auto wait = missing.empty() ? TimeLeft(deadline) : std::chrono::milliseconds(0);
    Result<std::string> got = store->Get(key(r), wait);
    if (got.ok()) continue;
    if (got.status().code() != StatusCode::kDeadlineExceeded) {
      return Status(got.status().code(), scope + " rendezvous (rank " + std::to_string(rank) +
                                             "): " + got.status().message());
    }
    missing.push_back(r);
  }
  if (missing.empty()) return Status::Ok();
  std::string names;
  for (size_t i = 0; i < missing.size(); ++i) {
    names += (i ? ", " : "") + std::to_string(missing[i]);
  }
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", timeout_for_message.count() / 1000.0);
  return Status(StatusCode::kDeadlineExceeded,
                scope + " rendezvous: rank" + (missing.size() > 1 ? "s " : " ") + names + " of " +
                    std::to_string(world_size) + " did not arrive within " + seconds +
                    " s (this is rank " + std::to_string(rank) + ")");
}

}  // namespace adctl
