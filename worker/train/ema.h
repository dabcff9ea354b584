// The exponential moving average of the trained weights (train.ema), by diffusers EMAModel's
// rule (training_utils.py): the k-th update moves each average toward its weight,
// `avg -= (1 - d_k) * (avg - w)`, with d_k = get_decay(k):
//
//   n = k - update_after_step - 1;  d_k = 0 while n <= 0 (the average copies the weights),
//   else min(decay, (1 + n) / (10 + n))
//
// Updates happen after the optimizer steps that are multiples of ema.update_every;
// update_after_step is ema.start_step / update_every (with update_every 1, diffusers' own
// meaning). The averages are fp32 tensors beside the weights (`device: gpu`, one multi-tensor
// kernel an update) or in host memory (`cpu`: the weights are copied over first). Full motion
// modules and LoRA adapters alike: the average is over the trainable tensors by name.
//
// Checkpoints hold the averages as an `ema/` folder that mirrors the weights' layout
// (ema/motion_adapter/ or ema/lora/), so exports read it as they read the checkpoint itself,
// and the update count in the manifest (kEmaUpdatesKey): resume continues exactly.
// Thread-compatible.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/checkpoint_export.h"  // kEmaCheckpointDir, kEmaUpdatesKey
#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

class Ema {
 public:
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

  // Averages of `params` (the live trainable tensors), starting as copies of them.
  Ema(const EmaSpec& spec, NamedTensors params);

  // diffusers' get_decay(k) for the k-th update (1-based).
  static double Decay(const EmaSpec& spec, int64_t k);

  Ema(const Ema&) = delete;
  Ema& operator=(const Ema&) = delete;
  ~Ema();

  // After optimizer step `step` (1-based): an update when it is due. Returns whether it was.
  bool AfterStep(int64_t step);
  // One update now (what AfterStep runs): the next k. On a GPU it runs on a side stream after
  // the work queued so far, overlapping the next step's forward; call Sync before the weights
  // change again (the next optimizer step) or the averages are read.
  void Update();
  // The current stream waits for the last update (nothing to do on the CPU).
  void Sync();

  int64_t updates() const { return updates_; }
  double last_decay() const { return last_decay_; }
  // The averages by the parameters' names (Sync first where an update may be in flight).
  const NamedTensors& averages() const { return averages_; }

  // The averages become copies of the weights again, no update counted.
  void Reset();
  // Takes the averages and update count of a checkpoint: `by_name` maps every parameter's
  // name (after `prefix`, e.g. "unet." for a LoRA file) to its average.
  Status Restore(const std::map<std::string, torch::Tensor>& by_name, int64_t updates,
                 const std::string& prefix = "");

  // While alive, the weights hold the averages; the destructor puts the weights back (the
  // same storage: CUDA graphs and optimizer state stay valid). For validation, eval, export.
  class Applied {
   public:
    explicit Applied(Ema* ema);
    Applied(const Applied&) = delete;
    Applied& operator=(const Applied&) = delete;
    ~Applied();

   private:
    Ema* ema_;
    std::vector<torch::Tensor> saved_;
  };

 private:
  struct SideStream;  // the GPU update's stream and events (CUDA builds)

  EmaSpec spec_;
  std::unique_ptr<SideStream> side_;
  NamedTensors params_;
  NamedTensors averages_;
  int64_t updates_ = 0;
  double last_decay_ = 0;
};

}  // namespace adctl
