// A training rank's step report (docs/metrics.md): what the loop measured (loss, learning rate,
// grad norm, step and data-wait time), completed with the throughput, the device's peak memory,
// the model FLOPs utilisation and a device sample, and handed to the Reporter every
// train.log_every steps and at the last step. Not thread-safe: the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>

#include "common/job_spec.h"
#include "worker/data/latent_dataset.h"
#include "worker/model/config.h"
#include "worker/report/device_sampler.h"
#include "worker/report/reporter.h"

namespace adctl {

class StepMetrics {
 public:
  // Starts the device sampler: a CPU rank's first utilisation covers the time from here, so
  // construct it where the rank's compute threads are set. Uses `spec.train` (log_every,
  // max_steps, batch sizes) and `spec.resources.peak_tflops`.
  StepMetrics(const JobSpec& spec, torch::Device device, int world_size, Reporter& reporter);

  // The work of one clip, for MFU: the model and the clips' shape once they are known.
  void SetWorkload(const UNetConfig& unet, const MotionConfig& motion, const LatentShape& shape);

  // Whether step `step` (1-based) is reported.
  bool Due(int64_t step) const;

  // Fills in total_steps, clips_per_second (from step_seconds), peak_memory_bytes, mfu_ratio,
  // time and the device values of `report`, which holds the loop's own numbers, and reports it.
  void Report(StepReport report);

 private:
  // Model FLOPs utilisation of this rank's GPU at `clips_per_second` (its own share); 0 on the
  // CPU or for a GPU whose peak is unknown (never a made-up number).
  double Mfu(double clips_per_second);
  int64_t PeakMemory() const;

  const TrainSpec& train_;
  const double peak_tflops_;  // resources.peak_tflops; 0: from the GPU's name
  const torch::Device device_;
  const int world_size_;
  Reporter& reporter_;
  DeviceSampler device_sampler_;
  UNetConfig unet_;
  MotionConfig motion_;
  LatentShape shape_;
  std::optional<double> mfu_scale_;  // training FLOPs per clip / GPU peak, set at first use
};

}  // namespace adctl
