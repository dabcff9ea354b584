// Eval loss on held-out clips (the spec's `eval`), reproducible: a number that depends only on
// the weights, so two runs, two checkpoints, or one checkpoint on 1 and on 2 ranks compare.
//
// Every (clip i, timestep t) pair draws its noise (and a cache's latent sample) from a
// generator seeded by (eval.seed, i, t), on the CPU; the clip's T timesteps go through the UNet
// as one batch, the same batch whatever the rank count; rank r evaluates clips i ≡ r (mod world
// size) and the per-pair losses meet in one all-reduce of a [clips × T] double tensor in which
// every slot has a single non-zero contribution, so the sum is exact and every rank computes the
// same means. No caption dropout; the model runs in eval mode (LoRA dropout off) without
// gradients.
//
// The held-out clips come from the training data (`holdout_clips`: drawn by eval.seed, never
// trained on: worker/data/sources.h, OpenTrainingData) or from a cache of their own
// (`eval.path`).
// Thread-compatible.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/data/latent_dataset.h"
#include "worker/data/sources.h"
#include "worker/diffusion/ddpm.h"
#include "worker/dist/communicator.h"
#include "worker/model/unet3d.h"
#include "worker/report/reporter.h"
#include "worker/train/ema.h"

namespace adctl {

// The eval loss of one evaluation.
struct EvalLoss {
  double loss = 0;                                      // mean over clips and timesteps
  std::vector<std::pair<int64_t, double>> by_timestep;  // (t, mean over clips), spec order
};

class Evaluator {
 public:
  // `clips` must outlive the evaluator. Timesteps must be in [0, the schedule's steps).
  Evaluator(std::shared_ptr<const LatentDataset> clips, const EvalSpec& spec,
            const NoiseSchedule& schedule, PredictionType prediction, torch::Device device,
            torch::ScalarType compute_dtype);

  // Every rank calls it at the same step (`comm` null: one rank). Leaves `model` in the mode it
  // found it.
  EvalLoss Run(UNet3DImpl& model, Communicator* comm, int rank, int world_size) const;
  // Run at training step `step` with the weights eval.weights names (ema: `ema`'s averages,
  // swapped in for the run), and rank 0's event saying the loss, the weights and the time.
  EvalLoss RunAtStep(UNet3DImpl& model, int64_t step, Ema* ema, Communicator* comm, int rank,
                     int world_size, Reporter& reporter) const;

  int64_t clips() const { return clips_->size(); }

 private:
  std::shared_ptr<const LatentDataset> clips_;
  WeightsSource weights_;
  std::vector<int64_t> timesteps_;
  uint64_t seed_;
  const NoiseSchedule& schedule_;
  PredictionType prediction_;
  torch::Device device_;
  torch::ScalarType compute_dtype_;
};

}  // namespace adctl
