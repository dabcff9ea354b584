#include "worker/train/train_state.h"

namespace adctl {

nlohmann::json TrainState::ToJson() const {
  return {
      {"step", step},
      {"samples_seen", samples_seen},
      {"sampler_epoch", sampler.epoch},
      {"sampler_position", sampler.position},
      {"world_size", world_size},
      {"global_batch", global_batch},
      {"seed", seed},
      {"job_name", job_name},
  };
}

Result<TrainState> TrainState::FromJson(const nlohmann::json& metadata) {
  TrainState s;
  try {
    s.step = metadata.at("step").get<int64_t>();
    s.samples_seen = metadata.at("samples_seen").get<int64_t>();
    s.sampler.epoch = metadata.at("sampler_epoch").get<int64_t>();
    s.sampler.position = metadata.at("sampler_position").get<int64_t>();
    s.world_size = metadata.value("world_size", s.world_size);
    s.global_batch = metadata.value("global_batch", s.global_batch);
    s.seed = metadata.value("seed", s.seed);
    s.job_name = metadata.value("job_name", s.job_name);
  } catch (const std::exception& e) {
    return DataLoss(std::string("bad trainer state: ") + e.what());
  }
  return s;
}

}  // namespace adctl
