// train.nan_policy: what a step whose loss or gradient norm turned NaN/Inf does. `fail`: the
// rank exits 6 (never retried: the noise is seeded by the data position, so a new attempt would
// meet the same NaN). `rollback`: while rollbacks are left, rank 0 records the next one in the
// job's rollbacks.json (common/job_layout.h) and every rank exits 7; the next attempt resumes
// from the newest checkpoint and reads the compounded learning-rate scale from that file.
// Not thread-safe: the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/worker_contract.h"
#include "worker/report/reporter.h"
#include "worker/train/trainer.h"

namespace adctl {

class NanRollback {
 public:
  explicit NanRollback(const TrainerOptions& options) : options_(options) {}

  // Under rollback: the rollbacks made before this attempt and their learning-rate scale
  // (rank 0 warns when there were any). A record that does not parse is kExitDataError.
  std::optional<Failure> Read(Reporter& reporter);

  // The learning-rate factor the rollbacks so far left (1 without any).
  double lr_scale() const { return lr_scale_; }

  // The failure of step `step` (loss or grad norm not finite): both numbers, and the first
  // tensor of `params` that is no longer finite, or that they all still are (then the batch or
  // the forward pass gave it); under rollback with rollbacks left, kExitRollback once rank 0
  // recorded the next one.
  Failure NotFinite(int64_t step, double loss, double grad_norm,
                    const std::vector<std::pair<std::string, torch::Tensor>>& params) const;

 private:
  const TrainerOptions& options_;
  nlohmann::json record_ = nlohmann::json::object();  // rollbacks.json as read
  double lr_scale_ = 1.0;
};

}  // namespace adctl
