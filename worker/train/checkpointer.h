// A training rank's checkpoints, as the trainer uses them: resume from the newest verified one
// (motion modules, optimizer state, TrainState), save the current state (rank 0 writes in the
// background, worker/train/checkpoint_saver.h), report each finished write, and export the
// final motion modules for the inference tools (export.formats). Layout and commit protocol:
// common/checkpoint_dir.h. Not thread-safe: the training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/job_spec.h"
#include "common/worker_contract.h"
#include "worker/data/sampler.h"
#include "worker/dist/communicator.h"
#include "worker/model/lora.h"
#include "worker/model/unet3d.h"
#include "worker/report/reporter.h"
#include "worker/train/checkpoint_saver.h"
#include "worker/train/ema.h"
#include "worker/train/lora_training.h"
#include "worker/train/optimizer.h"
#include "worker/train/train_state.h"
#include "worker/train/trainer.h"

namespace adctl {

// What a checkpoint of `state.step` holds, as the live tensors (the saver copies them): the
// motion modules, or `lora`'s adapters (non-null) with their metadata; the optimizer state; the
// manifest's metadata (`state`, and `eval_loss` when that step evaluated: checkpoint.keep_best
// ranks by it); `ema`'s averages (non-null) under the same names, with its update count.
CheckpointState CheckpointContents(UNet3DImpl& model, const TrainedLora* lora, AdamW& optimizer,
                                   const TrainState& state, std::optional<double> eval_loss,
                                   Ema* ema);

class Checkpointer {
 public:
  // Checkpoints of the job in `options` under its checkpoint folder (checkpoint.dir).
  // `current` returns what a checkpoint of now holds (the live tensors; the saver copies them).
  Checkpointer(const TrainerOptions& options, std::function<CheckpointState()> current);
  ~Checkpointer();

  const std::string& root() const { return root_; }

  // Rank 0 with checkpoints enabled: a folder that cannot take a checkpoint is a configuration
  // error (kExitBadSpec), said before hours of loading and training.
  std::optional<Failure> CheckFolder() const;

  // Loads the newest verified checkpoint into `model`'s motion modules, or into `lora` for a
  // LoRA job (non-null), and `optimizer` (its tensors moved to `device`), and its step, samples
  // seen and sampler position into `state` and `sampler`. Without one (none, or none that
  // verifies: a warning) nothing changes. A checkpoint of the other kind (a LoRA's for a
  // full-module job, or the reverse) is kExitModelError naming what it holds. `ema` (train.ema,
  // else null) takes the checkpoint's averages (ema/) and update count; a checkpoint written
  // without them restarts the average from the resumed weights, with a warning.
  std::optional<Failure> Resume(UNet3DImpl& model, LoraAdapters* lora, AdamW& optimizer,
                                torch::Device device, DistributedSampler& sampler,
                                TrainState& state, Ema* ema = nullptr);

  // Rank 0 with checkpoints enabled: starts the background writer. `reserve`: allocate its
  // pinned host buffers now (on a GPU pinning gigabytes takes a while), not at the first save.
  void StartWriter(bool reserve);

  // Checkpoint of step `step`. Rank 0 copies the state to host memory and writes it in the
  // background; with `wait` it also waits for the commit and the other ranks wait for rank 0
  // at a barrier of `comm` (the final and the stop checkpoints). Without, training goes on
  // during the write and the next steps collect its result (Collect). Does nothing when
  // checkpoints are disabled.
  std::optional<Failure> Save(int64_t step, bool wait, Communicator* comm);
  // Step `step`'s checkpoint, unless it has one already (then waits for its write).
  std::optional<Failure> SaveFinal(int64_t step, Communicator* comm);
  // Rank 0: reports the background write that finished (with `wait`, waits for the one in
  // flight); a failed write fails the run. A write that fails because the disk is full or
  // read-only fails the job with that reason (kExitDataError); anything else is a crash the
  // restart policy may retry.
  std::optional<Failure> Collect(bool wait);

  // export.formats: rank 0 writes the final motion modules (or LoRA) for the inference tools
  // into <job-dir>/export/step-N/, from step `step`'s checkpoint (or the live state without
  // one), through common/checkpoint_export.h.
  std::optional<Failure> ExportForInferenceTools(int64_t step);

 private:
  // The checkpoint's motion modules into `model`, or its LoRA into `lora` (non-null).
  std::optional<Failure> LoadWeights(const std::string& dir, UNet3DImpl& model, LoraAdapters* lora);
  // Newer checkpoints than `step` that did not verify: the job's events say why it resumes
  // further back.
  void ReportSkipped(int64_t step);

  const TrainerOptions& options_;
  const JobSpec& spec_;
  Reporter& reporter_;
  const std::function<CheckpointState()> current_;
  const std::string root_;
  std::string resumed_from_;
  std::string last_path_;
  int64_t last_step_ = -1;
  int64_t last_bytes_ = 0;    // the size of the last one written, for free-space checks
  double stall_seconds_ = 0;  // training time the last checkpoint took
  std::unique_ptr<CheckpointSaver> saver_;  // rank 0, when checkpoints are enabled
};

}  // namespace adctl
