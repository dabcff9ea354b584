// The UNet as a training rank holds it (model.*): a preset built at random from train.seed, or
// the model files loaded strictly; every weight but the motion modules' frozen and in the
// compute dtype (the motion modules stay fp32 masters), on the rank's device, channels-last
// where the fused kernels run, with the spec's gradient checkpointing. Rank 0 writes the tiny
// preset's frozen UNet into the job directory, so its checkpoints load as a diffusers pair.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "common/worker_contract.h"
#include "worker/model/unet3d.h"
#include "worker/report/reporter.h"
#include "worker/train/trainer.h"

namespace adctl {

// Builds the UNet of `options.spec` into `model`: kExitModelError for model files that do not
// load, kExitCrash for a preset that cannot be written out.
std::optional<Failure> BuildTrainingModel(const TrainerOptions& options, torch::Device device,
                                          torch::ScalarType compute_dtype, UNet3D& model);

}  // namespace adctl
