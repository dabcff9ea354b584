// model.lora as a training rank holds it: the adapters that train, attached to the frozen UNet
// (new ones drawn from train.seed, the same on every rank, or init_from's), and the metadata
// every checkpoint and export of them carries (rank, alpha, targets, scope, the base motion
// module and, from rank 0, its SHA-256). Not thread-safe: the training thread.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "common/worker_contract.h"
#include "worker/model/lora.h"
#include "worker/model/unet3d.h"
#include "worker/report/reporter.h"
#include "worker/train/trainer.h"

namespace adctl {

struct TrainedLora {
  LoraAdapters adapters;
  std::map<std::string, std::string> metadata;  // the LoRA file's metadata at checkpoints
};

// Attaches options.spec.model.lora's adapters to `model` into `out` and says so in an event.
// kExitBadSpec for a spec the model refuses (a target that matches nothing, init_from's rank
// against model.lora.rank), kExitModelError for files that do not load.
std::optional<Failure> AttachTrainedLora(const TrainerOptions& options, UNet3DImpl& model,
                                         Reporter& reporter, std::optional<TrainedLora>& out);

}  // namespace adctl
