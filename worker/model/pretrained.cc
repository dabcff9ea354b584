#include "worker/model/pretrained.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/json_errors.h"
#include "worker/model/config.h"

namespace adctl {

namespace fs = std::filesystem;

Result<std::string> PretrainedComponent(const std::string& dir, const std::string& component) {
  if (!fs::is_directory(dir)) {
    return NotFound("model.pretrained: " + dir + " is not a directory");
  }
  const fs::path path = fs::path(dir) / component;
  if (fs::is_directory(path)) return path.string();
  std::string found;
  for (const auto& e : fs::directory_iterator(dir)) {
    found += (found.empty() ? "" : ", ") + e.path().filename().string();
  }
  return NotFound("model.pretrained: " + dir + " has no " + component +
                  "/ (a diffusers Stable Diffusion folder has unet/, vae/, text_encoder/, "
                  "tokenizer/, scheduler/; found: " +
                  (found.empty() ? "nothing" : found) + ")");
}

Result<SchedulerConfig> ReadSchedulerConfig(const std::string& pretrained_dir) {
  auto dir = PretrainedComponent(pretrained_dir, "scheduler");
  if (!dir.ok()) return dir.status();
  const std::string path = *dir + "/scheduler_config.json";
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  SchedulerConfig c;
  // diffusers' names, which are the spec's (train.beta_schedule, train.prediction_type).
  std::string beta_schedule = "scaled_linear", prediction_type = "epsilon",
              timestep_spacing = "leading";
  try {
    const auto j = nlohmann::json::parse(*text);
    beta_schedule = j.value("beta_schedule", beta_schedule);
    c.beta_start = j.value("beta_start", c.beta_start);
    c.beta_end = j.value("beta_end", c.beta_end);
    c.num_train_timesteps = j.value("num_train_timesteps", c.num_train_timesteps);
    prediction_type = j.value("prediction_type", prediction_type);
    c.steps_offset = j.value("steps_offset", c.steps_offset);
    c.set_alpha_to_one = j.value("set_alpha_to_one", c.set_alpha_to_one);
    c.clip_sample = j.value("clip_sample", c.clip_sample);
    timestep_spacing = j.value("timestep_spacing", timestep_spacing);
  } catch (const std::exception& e) {
    return InvalidArgument(path + ": " + JsonErrorWithoutContent(e));
  }
  const auto schedule = SpecEnumValue<BetaSchedule>(beta_schedule);
  if (!schedule || *schedule == BetaSchedule::kPretrained) {
    return InvalidArgument(path + ": beta_schedule '" + beta_schedule +
                           "' is not supported (linear or scaled_linear)");
  }
  c.beta_schedule = *schedule;
  const auto prediction = SpecEnumValue<PredictionType>(prediction_type);
  if (!prediction) {
    return InvalidArgument(path + ": prediction_type '" + prediction_type +
                           "' is not supported (epsilon or v_prediction)");
  }
  c.prediction_type = *prediction;
  const auto spacing = SpecEnumValue<TimestepSpacing>(timestep_spacing);
  if (!spacing) {
    return InvalidArgument(path + ": timestep_spacing '" + timestep_spacing +
                           "' is not supported (leading, trailing or linspace)");
  }
  c.timestep_spacing = *spacing;
  if (c.num_train_timesteps < 2 || !(c.beta_start > 0) || !(c.beta_end < 1) ||
      c.beta_start > c.beta_end) {
    return InvalidArgument(path + ": beta_start/beta_end/num_train_timesteps out of range");
  }
  return c;
}

}  // namespace adctl
