#include "common/job_layout.h"

namespace adctl {

std::string JobLayout::spec() const { return dir_ + "/spec.yaml"; }

std::string JobLayout::preset_unet2d() const { return dir_ + "/model/unet2d"; }

std::string JobLayout::checkpoints(const std::string& spec_checkpoint_dir) const {
  return spec_checkpoint_dir.empty() ? dir_ + "/checkpoints" : spec_checkpoint_dir;
}

std::string JobLayout::logs() const { return dir_ + "/logs"; }

std::string JobLayout::attempt_logs(int attempt) const {
  return logs() + "/attempt-" + std::to_string(attempt);
}

std::string JobLayout::rank_log(int attempt, int rank) const {
  return attempt_logs(attempt) + "/rank-" + std::to_string(rank) + ".log";
}

std::string JobLayout::rank_exit(int attempt, int rank) const {
  return attempt_logs(attempt) + "/rank-" + std::to_string(rank) + ".exit";
}

std::string JobLayout::rendezvous(int attempt) const {
  return dir_ + "/rendezvous/attempt-" + std::to_string(attempt);
}

}  // namespace adctl
