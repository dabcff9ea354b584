#include "common/job_layout.h"

#include <cstdio>

namespace adctl {

namespace {

// "step-00000042", the naming of checkpoint directories too.
std::string StepDirName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

}  // namespace

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

std::string JobLayout::samples() const { return dir_ + "/samples"; }

std::string JobLayout::samples_step(int64_t step) const {
  return samples() + "/" + StepDirName(step);
}

std::string JobLayout::exports() const { return dir_ + "/export"; }

std::string JobLayout::exports_step(int64_t step) const {
  return exports() + "/" + StepDirName(step);
}

}  // namespace adctl
