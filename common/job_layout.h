// The job directory, in one place: every file adctld, adworker and adctl find under
// <data-dir>/jobs/<id>/ is named here.
//
//   spec.yaml                          the effective spec (written by adctld at each launch)
//   model/unet2d/                      the materialised `tiny` preset UNet (rank 0 writes it once)
//   checkpoints/step-NNNNNNNN/         committed checkpoints (unless checkpoint.dir is set)
//   checkpoint_pins.json               steps retention keeps (adctld writes it: adctl ckpt pin)
//   rollbacks.json                     train.nan_policy rollback: count, lr scale, where (rank 0)
//   logs/attempt-A/rank-R.log          stdout+stderr of a rank (written by the launcher)
//   logs/attempt-A/rank-R.exit         its exit status (written by the shepherd)
//   rendezvous/attempt-A/              the file rendezvous of standalone multi-rank runs
//   samples/step-NNNNNNNN/             validation samples of a step (rank 0 writes them):
//                                      sample-I.mp4, sample-I.gif, grid.mp4, grid.gif,
//                                      samples.json (step, prompts, files, render seconds)
//   export/step-NNNNNNNN/              motion modules for the inference tools: motion_adapter/
//                                      (diffusers), motion_module.safetensors (AnimateDiff)
//
// A plain value type: thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace adctl {

class JobLayout {
 public:
  explicit JobLayout(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string spec() const;
  std::string preset_unet2d() const;
  // The checkpoint root: checkpoint.dir when the spec sets one, else <dir>/checkpoints.
  std::string checkpoints(const std::string& spec_checkpoint_dir = "") const;
  // The steps `adctl ckpt pin` keeps (common/checkpoint_dir.h, ReadCheckpointPins).
  std::string checkpoint_pins() const;
  // train.nan_policy rollback: how many rollbacks the job made and the learning-rate scale
  // they left (rank 0 writes it before a rollback exit; every rank reads it at start).
  std::string rollbacks() const;
  std::string logs() const;
  std::string attempt_logs(int attempt) const;
  std::string rank_log(int attempt, int rank) const;
  std::string rank_exit(int attempt, int rank) const;
  // What the rank could not deliver to adctld yet (adctl.v1.PendingReports).
  std::string rank_pending_reports(int attempt, int rank) const;
  std::string rendezvous(int attempt) const;
  std::string samples() const;
  std::string samples_step(int64_t step) const;
  std::string exports() const;
  std::string exports_step(int64_t step) const;

  // Artifacts are the files under samples/ and export/, named relative to the job directory.
  // The absolute path of `relative` when it names one: relative, '/'-separated, no "." or ".."
  // component, under samples/ or export/, and (when it exists) still inside the job directory
  // after symlinks are resolved. Otherwise InvalidArgument naming the path.
  Result<std::string> artifact(const std::string& relative) const;

 private:
  std::string dir_;
};

}  // namespace adctl
