#include "worker/train/nan_rollback.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "common/fs_util.h"
#include "common/job_layout.h"

namespace adctl {

std::optional<Failure> NanRollback::Read(Reporter& reporter) {
  const TrainSpec& t = options_.spec.train;
  if (t.nan_policy != NanPolicy::kRollback) return std::nullopt;
  const std::string path = JobLayout(options_.job_dir).rollbacks();
  const std::string text = ReadFileText(path);
  if (text.empty()) return std::nullopt;
  try {
    record_ = nlohmann::json::parse(text);
    lr_scale_ = record_.at("lr_scale").get<double>();
    const int64_t done = record_.at("rollbacks").get<int64_t>();
    if (!(lr_scale_ > 0 && lr_scale_ <= 1) || done < 0) throw std::out_of_range("values");
    if (options_.rank == 0 && done > 0) {
      char what[200];
      std::snprintf(
          what, sizeof(what),
          "train.nan_policy rollback: %lld of %lld made; the learning rate is x %g (the last "
          "at step %lld)",
          static_cast<long long>(done), static_cast<long long>(t.max_rollbacks), lr_scale_,
          static_cast<long long>(record_.at("history").back().at("step").get<int64_t>()));
      reporter.OnEvent(EventLevel::kWarning, what);
    }
  } catch (const std::exception& e) {
    return Failure{kExitDataError, path + ": not a rollback record (" + e.what() +
                                       "); remove it to start the rollbacks over"};
  }
  return std::nullopt;
}

Failure NanRollback::NotFinite(
    int64_t step, double loss, double grad_norm,
    const std::vector<std::pair<std::string, torch::Tensor>>& params) const {
  char numbers[96];
  std::snprintf(numbers, sizeof(numbers), "loss %g, grad norm %g", loss, grad_norm);
  // The optimizer step has applied the gradients: a non-finite one shows in the weights.
  std::string where =
      "every trainable tensor is still finite: the batch's data or the forward pass gave it";
  for (const auto& [name, tensor] : params) {
    if (!torch::isfinite(tensor).all().item<bool>()) {
      where = "first non-finite trainable tensor: " + name;
      break;
    }
  }
  Failure f{kExitNotFinite,
            "not finite at step " + std::to_string(step) + " (" + numbers + "); " + where};
  const TrainSpec& t = options_.spec.train;
  if (t.nan_policy != NanPolicy::kRollback) return f;
  const int64_t done = record_.value("rollbacks", int64_t{0});
  if (done >= t.max_rollbacks) {
    f.message += "; rollbacks exhausted (" + std::to_string(done) + " of " +
                 std::to_string(t.max_rollbacks) + ", train.max_rollbacks)";
    return f;
  }
  // The job restarts (exit 7, retryable) from its newest checkpoint; every rank of the next
  // attempt reads the new scale from rollbacks.json, which rank 0 writes now.
  const double scale = lr_scale_ * t.rollback_lr_factor;
  nlohmann::json next = record_;
  next["rollbacks"] = done + 1;
  next["lr_scale"] = scale;
  next["history"].push_back({{"step", step},
                             {"loss", std::isfinite(loss) ? nlohmann::json(loss) : nullptr},
                             {"lr_scale", scale}});
  if (options_.rank == 0) {
    Status written =
        WriteFileAtomically(JobLayout(options_.job_dir).rollbacks(), next.dump(2) + "\n");
    if (!written.ok()) {
      return {kExitStorageError,
              f.message + "; the rollback could not be recorded: " + written.message()};
    }
  }
  char lr[48];
  std::snprintf(lr, sizeof(lr), "%g", scale);
  f.exit_code = kExitRollback;
  f.message += "; rollback " + std::to_string(done + 1) + " of " + std::to_string(t.max_rollbacks) +
               ": restarting from the newest checkpoint with the learning rate x " + lr;
  return f;
}

}  // namespace adctl
