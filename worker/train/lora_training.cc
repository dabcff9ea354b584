#include "worker/train/lora_training.h"

#include <cstdio>

#include "common/checkpoint_export.h"
#include "common/sha256.h"

namespace adctl {

std::optional<Failure> AttachTrainedLora(const TrainerOptions& options, UNet3DImpl& model,
                                         Reporter& reporter, std::optional<TrainedLora>& out) {
  const JobSpec& spec = options.spec;
  const LoraSpec& l = spec.model.lora;
  auto adapters = l.init_from.empty()
                      ? LoraAdapters::Attach(model, l, static_cast<uint64_t>(spec.train.seed))
                      : LoraAdapters::Load(model, l.init_from);
  if (!adapters.ok()) {
    const std::string field = l.init_from.empty() ? "model.lora: " : "model.lora.init_from: ";
    return Failure{
        adapters.status().code() == StatusCode::kInvalidArgument ? kExitBadSpec : kExitModelError,
        field + adapters.status().ToString()};
  }
  if (!l.init_from.empty() && adapters->rank() != l.rank) {
    return Failure{kExitBadSpec, "model.lora.init_from: " + l.init_from + " has rank " +
                                     std::to_string(adapters->rank()) + ", model.lora.rank says " +
                                     std::to_string(l.rank)};
  }
  adapters->SetDropout(l.dropout);
  const std::string base = LoraBaseMotionModule(spec.model);
  std::map<std::string, std::string> metadata = adapters->DiffusersMetadata(/*fold_alpha=*/false);
  std::string targets;
  for (const auto& t : adapters->targets()) targets += (targets.empty() ? "" : ",") + t;
  char alpha[32];
  std::snprintf(alpha, sizeof(alpha), "%.17g", adapters->alpha());
  metadata[kLoraMetaRank] = std::to_string(adapters->rank());
  metadata[kLoraMetaAlpha] = alpha;
  metadata[kLoraMetaTargets] = targets;
  metadata[kLoraMetaScope] = Name(l.scope);
  metadata[kLoraMetaBase] = base;
  metadata["motion_norm"] =
      model.motion_config().norm_across_frames ? "across_frames" : "per_frame";
  if (options.rank == 0) {  // only rank 0 writes checkpoints and exports
    auto weights = BaseMotionWeightsFile(base);
    auto sha = weights.ok() ? Sha256File(*weights) : Result<std::string>(weights.status());
    if (!sha.ok()) return Failure{kExitModelError, "model.lora base: " + sha.status().ToString()};
    metadata[kLoraMetaBaseSha256] = *sha;
  }
  reporter.OnEvent(EventLevel::kInfo,
                   "LoRA rank " + std::to_string(adapters->rank()) + ", alpha " + alpha + " on " +
                       std::to_string(adapters->size()) + " projections (" + targets + "; scope " +
                       Name(l.scope) + "): " + std::to_string(adapters->parameter_count()) +
                       " trainable parameters; the base motion module " + base + " stays frozen" +
                       (l.init_from.empty() ? "" : "; continued from " + l.init_from));
  out = TrainedLora{std::move(*adapters), std::move(metadata)};
  return std::nullopt;
}

}  // namespace adctl
