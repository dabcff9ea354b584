// Sweeps: `adctl submit spec.yaml --sweep train.lr=1e-4,5e-5 --sweep model.lora.rank=16,64`
// submits the cartesian product of the values as jobs that share a `group` label (and carry a
// label per swept field), so `adctl ls --group G` shows them as a whole and
// `adctl cancel --label group=G` stops them together.
#pragma once

#include <string>
#include <vector>

#include "adctl/v1/job_service.pb.h"
#include "common/status.h"

namespace adctl::cli {

struct SweepAxis {
  std::string path;                 // a spec field, as for --set ("train.lr")
  std::vector<std::string> values;  // in the order given
};

// "path=v1,v2,…": at least one value, none empty (a value cannot hold a comma).
Result<SweepAxis> ParseSweep(const std::string& text);

// The points of the cartesian product, the first axis changing slowest: each a list of
// "path=value" overrides, one per axis. InvalidArgument for a path swept twice or more than
// 256 points.
Result<std::vector<std::vector<std::string>>> SweepPoints(const std::vector<SweepAxis>& axes);

// One line for a group's jobs: how many in each state, and the lowest eval loss with its job and
// swept values ("group g-1: 4 jobs: 1 RUNNING, 3 SUCCEEDED; best eval loss 0.1234: j-2
// (train.lr=5e-05)").
std::string GroupSummary(const std::string& group, const std::vector<adctl::v1::Job>& jobs);

// The sweep's group id: derived from the submission id when there is one (the same sweep
// submitted again is the same group, and its jobs the same jobs), else random. "g-" + 10 hex.
std::string SweepGroup(const std::string& submission_id);

}  // namespace adctl::cli
