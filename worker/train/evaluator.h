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
// trained on: SplitHoldout, SubsetDataset) or from a cache of their own (`eval.path`).
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
#include "worker/diffusion/ddpm.h"
#include "worker/dist/communicator.h"
#include "worker/model/unet3d.h"

namespace adctl {

// The eval loss of one evaluation.
struct EvalLoss {
  double loss = 0;                                      // mean over clips and timesteps
  std::vector<std::pair<int64_t, double>> by_timestep;  // (t, mean over clips), spec order
};

// `count` clips of [0, dataset_size) held out for eval, drawn by `seed` (ascending), and the
// others, for training (ascending).
struct HoldoutSplit {
  std::vector<int64_t> eval;
  std::vector<int64_t> train;
};
HoldoutSplit SplitHoldout(int64_t dataset_size, int64_t count, uint64_t seed);

// The clips `indices` of `base`, in that order: clip i is base's clip indices[i].
class SubsetDataset : public LatentDataset {
 public:
  SubsetDataset(std::shared_ptr<const LatentDataset> base, std::vector<int64_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {}
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  const LatentShape& shape() const override { return base_->shape(); }
  LatentSample Get(int64_t index) const override { return base_->Get(indices_.at(index)); }
  LatentSample Draw(int64_t index, at::Generator& gen, double caption_dropout) const override {
    return base_->Draw(indices_.at(index), gen, caption_dropout);
  }
  bool has_empty_caption() const override { return base_->has_empty_caption(); }

 private:
  std::shared_ptr<const LatentDataset> base_;
  std::vector<int64_t> indices_;
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

  int64_t clips() const { return clips_->size(); }

 private:
  std::shared_ptr<const LatentDataset> clips_;
  std::vector<int64_t> timesteps_;
  uint64_t seed_;
  const NoiseSchedule& schedule_;
  PredictionType prediction_;
  torch::Device device_;
  torch::ScalarType compute_dtype_;
};

}  // namespace adctl
