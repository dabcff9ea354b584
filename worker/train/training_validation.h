// Validation during training (the spec's `validation`): rank 0 renders the prompts with the
// weights as they are at the due steps and reports the samples; the other ranks wait at a
// barrier meanwhile. The renderer itself is worker/sample/validation.h. Not thread-safe: the
// training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "common/worker_contract.h"
#include "worker/diffusion/ddpm.h"
#include "worker/dist/communicator.h"
#include "worker/model/unet3d.h"
#include "worker/report/reporter.h"
#include "worker/sample/validation.h"
#include "worker/train/ema.h"
#include "worker/train/trainer.h"

namespace adctl {

class TrainingValidation {
 public:
  // Rank 0's renderer when validation.prompts is set (none otherwise): kExitBadSpec for a build
  // without FFmpeg or prompts the model refuses, kExitModelError for files that do not load.
  std::optional<Failure> Build(const TrainerOptions& options, UNet3DImpl& model,
                               const NoiseSchedule& schedule, PredictionType prediction,
                               torch::Device device, torch::ScalarType compute_dtype);

  // Every rank calls it at each step ValidationDue names (validation.weights ema: `ema`'s
  // averages are swapped in for the render); a failed render is kExitCrash.
  std::optional<Failure> Render(UNet3DImpl& model, int64_t step, Ema* ema, Reporter& reporter,
                                Communicator* comm);

 private:
  const TrainerOptions* options_ = nullptr;
  std::unique_ptr<ValidationRenderer> renderer_;  // rank 0, when validation.prompts is set
};

}  // namespace adctl
