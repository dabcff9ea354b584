#include "worker/train/training_validation.h"

#include "worker/video/ffmpeg_log.h"

namespace adctl {

std::optional<Failure> TrainingValidation::Build(const TrainerOptions& options, UNet3DImpl& model,
                                                 const NoiseSchedule& schedule,
                                                 PredictionType prediction, torch::Device device,
                                                 torch::ScalarType compute_dtype) {
  options_ = &options;
  if (options.spec.validation.prompts.empty() || options.rank != 0) return std::nullopt;
  if (!HaveFfmpeg()) {
    return Failure{kExitBadSpec,
                   "validation.prompts: this adworker was built without FFmpeg, so it cannot "
                   "write sample videos (rebuild with libavcodec-dev, libavformat-dev, "
                   "libswscale-dev)"};
  }
  auto renderer = ValidationRenderer::Make(options.spec, model, schedule, prediction, device,
                                           compute_dtype, options.job_dir);
  if (!renderer.ok()) {
    const int code =
        renderer.status().code() == StatusCode::kInvalidArgument ? kExitBadSpec : kExitModelError;
    return Failure{code, renderer.status().ToString()};
  }
  renderer_ = std::move(*renderer);
  return std::nullopt;
}

std::optional<Failure> TrainingValidation::Render(UNet3DImpl& model, int64_t step, Ema* ema,
                                                  Reporter& reporter, Communicator* comm) {
  if (renderer_) {
    std::optional<Ema::Applied> averaged;  // validation.weights: ema
    if (ema != nullptr && options_->spec.validation.weights == WeightsSource::kEma) {
      averaged.emplace(ema);
    }
    auto rendered = renderer_->Render(model, step);
    if (!rendered.ok()) return Failure{kExitCrash, "validation: " + rendered.status().ToString()};
    reporter.OnSamples(ToSamplesReport(*rendered, options_->job_dir));
  }
  if (comm != nullptr) comm->Barrier();
  return std::nullopt;
}

}  // namespace adctl
