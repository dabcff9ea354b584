// A Stable Diffusion model folder in the diffusers layout users download: unet/, vae/,
// text_encoder/, tokenizer/, scheduler/ (each model folder with *.safetensors or only the
// *.fp16.safetensors variant; FindModelWeights picks). This file resolves its parts with errors
// that list what the folder holds, and reads scheduler/scheduler_config.json.
#pragma once

#include <cstdint>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

// `dir`/`component` when it is a directory; else an error naming the folder and its entries.
Result<std::string> PretrainedComponent(const std::string& dir, const std::string& component);

// The fields of a diffusers DDPM/DDIM scheduler_config.json that training and sampling use.
struct SchedulerConfig {
  BetaSchedule beta_schedule = BetaSchedule::kScaledLinear;  // never kPretrained
  double beta_start = 0.00085;
  double beta_end = 0.012;
  int64_t num_train_timesteps = 1000;
  PredictionType prediction_type = PredictionType::kEpsilon;
  int64_t steps_offset = 1;
  bool set_alpha_to_one = false;
  bool clip_sample = false;
  TimestepSpacing timestep_spacing = TimestepSpacing::kLeading;
};

// Reads `dir`/scheduler/scheduler_config.json; an unsupported schedule or prediction type is
// an error naming the file.
Result<SchedulerConfig> ReadSchedulerConfig(const std::string& pretrained_dir);

}  // namespace adctl
