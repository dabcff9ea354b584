// Where training stands, as a checkpoint records it in its manifest's `metadata`: the only place
// the metadata keys are spelled (`step`, `samples_seen`, `sampler_epoch`, `sampler_position`,
// and for people and the resume message `world_size`, `global_batch`, `seed`, `job_name`).
// A resume restores step, samples_seen and the sampler; the weights and the optimizer state
// are the checkpoint's files (worker/train/checkpoint_saver.h). Torch-free; a plain value.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "worker/data/sampler.h"

namespace adctl {

struct TrainState {
  int64_t step = 0;          // optimizer steps done
  int64_t samples_seen = 0;  // global clips consumed
  // The batches consumed so far (not one being prefetched); the same for every world size.
  DistributedSampler::State sampler;
  // The run that wrote it; read back for the resume message only.
  int64_t world_size = 1;
  int64_t global_batch = 0;
  int64_t seed = 0;
  std::string job_name;

  nlohmann::json ToJson() const;
  // kDataLoss naming the missing or mistyped key ("bad trainer state: ..."). Checkpoints that
  // lack world_size, global_batch, seed or job_name read as the defaults above.
  static Result<TrainState> FromJson(const nlohmann::json& metadata);
};

}  // namespace adctl
