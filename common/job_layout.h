// The job directory, in one place: every file adctld, adworker and adctl find under
// <data-dir>/jobs/<id>/ is named here.
//
//   spec.yaml                          the effective spec (written by adctld at each launch)
//   model/unet2d/                      the materialised `tiny` preset UNet (rank 0 writes it once)
//   checkpoints/step-NNNNNNNN/         committed checkpoints (unless checkpoint.dir is set)
//   logs/attempt-A/rank-R.log          stdout+stderr of a rank (written by the launcher)
//   logs/attempt-A/rank-R.exit         its exit status (written by the shepherd)
//   rendezvous/attempt-A/              the file rendezvous of standalone multi-rank runs
//
// A plain value type: thread-compatible.
#pragma once

#include <string>

namespace adctl {

class JobLayout {
 public:
  explicit JobLayout(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string spec() const;
  std::string preset_unet2d() const;
  // The checkpoint root: checkpoint.dir when the spec sets one, else <dir>/checkpoints.
  std::string checkpoints(const std::string& spec_checkpoint_dir = "") const;
  std::string logs() const;
  std::string attempt_logs(int attempt) const;
  std::string rank_log(int attempt, int rank) const;
  std::string rank_exit(int attempt, int rank) const;
  std::string rendezvous(int attempt) const;

 private:
  std::string dir_;
};

}  // namespace adctl
