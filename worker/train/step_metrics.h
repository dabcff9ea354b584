// A training rank's step report (docs/metrics.md): what the loop measured (loss, learning rate,
// grad norm, step and data-wait time), completed with the throughput, the device's peak memory,
// the model FLOPs utilisation and a device sample, and handed to the Reporter every
// train.log_every steps and at the last step. Not thread-safe: the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <vector>

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

  // The work of one clip, for MFU: the model and the clips' shapes (one per shape bucket) once
  // they are known.
  void SetWorkload(const UNetConfig& unet, const MotionConfig& motion,
                   std::vector<LatentShape> buckets);

  // Whether step `step` (1-based) is reported.
  bool Due(int64_t step) const;

  // Fills in total_steps, clips_per_second (from step_seconds), peak_memory_bytes, mfu_ratio,
  // time and the device values of `report`, which holds the loop's own numbers, and reports it.
  // `buckets`: the shape bucket of each of the step's micro-batches (empty: bucket 0); the
  // report's `bucket` is theirs, or -1 when they differ.
  void Report(StepReport report, const std::vector<int>& buckets = {});

 private:
  // Model FLOPs utilisation of this rank's GPU at `clips_per_second` (its own share) of clips of
  // `buckets` (the mean of their work); 0 on the CPU or for a GPU whose peak is unknown (never a
  // made-up number).
  double Mfu(double clips_per_second, const std::vector<int>& buckets);
  // Training FLOPs per clip of bucket b / the GPU's peak (0: unknown), said once per bucket.
  double MfuScale(int b);
  int64_t PeakMemory() const;

  const TrainSpec& train_;
  const double peak_tflops_;  // resources.peak_tflops; 0: from the GPU's name
  const torch::Device device_;
  const int world_size_;
  Reporter& reporter_;
  DeviceSampler device_sampler_;
  UNetConfig unet_;
  MotionConfig motion_;
  std::vector<LatentShape> buckets_;
  std::vector<std::optional<double>> mfu_scales_;  // MfuScale of each bucket, set at first use
};

}  // namespace adctl
