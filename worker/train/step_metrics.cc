#include "worker/train/step_metrics.h"

#include <algorithm>
#include <string>

#include "common/clock.h"
#include "worker/model/flops.h"

#if defined(ADCTL_WITH_CUDA)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace adctl {

StepMetrics::StepMetrics(const JobSpec& spec, torch::Device device, int world_size,
                         Reporter& reporter)
    : train_(spec.train),
      peak_tflops_(spec.resources.peak_tflops),
      device_(device),
      world_size_(world_size),
      reporter_(reporter),
      device_sampler_(device.is_cuda(), torch::get_num_threads()) {}

void StepMetrics::SetWorkload(const UNetConfig& unet, const MotionConfig& motion,
                              std::vector<LatentShape> buckets) {
  unet_ = unet;
  motion_ = motion;
  buckets_ = std::move(buckets);
  mfu_scales_.assign(buckets_.size(), std::nullopt);
}

bool StepMetrics::Due(int64_t step) const {
  return step % std::max<int64_t>(1, train_.log_every) == 0 || step == train_.max_steps;
}

void StepMetrics::Report(StepReport r, const std::vector<int>& buckets) {
  const int64_t global_batch = train_.batch_size * train_.grad_accum * world_size_;
  r.total_steps = train_.max_steps;
  r.clips_per_second = global_batch / r.step_seconds;
  r.peak_memory_bytes = PeakMemory();
  r.mfu_ratio = Mfu(r.clips_per_second / std::max(1, world_size_), buckets);
  r.bucket = buckets.empty() ? 0 : buckets.front();
  for (int b : buckets) {
    if (b != r.bucket) r.bucket = -1;  // several in one step
  }
  r.time = NowSeconds();
  SetDeviceValues(device_sampler_.Sample(), &r);
  reporter_.OnStep(r);
}

double StepMetrics::Mfu(double clips_per_second, const std::vector<int>& buckets) {
  if (!device_.is_cuda() || buckets_.empty()) return 0;
  double scale = 0;
  for (int b : buckets) scale += MfuScale(b);
  scale = buckets.empty() ? MfuScale(0) : scale / static_cast<double>(buckets.size());
  return scale * clips_per_second;
}

double StepMetrics::MfuScale(int b) {
  std::optional<double>& scale = mfu_scales_.at(static_cast<size_t>(b));
  if (!scale) {
    const LatentShape& shape = buckets_[static_cast<size_t>(b)];
    const double flops =
        CountTrainingFlops(unet_, motion_, shape.frames, shape.height, shape.width).PerClip();
    double peak = peak_tflops_ * 1e12;
#if defined(ADCTL_WITH_CUDA)
    if (peak <= 0) peak = DenseBf16PeakFlops(at::cuda::getDeviceProperties(device_.index())->name);
#endif
    scale = peak > 0 ? flops / peak : 0;
    const std::string of = buckets_.size() > 1 ? " of bucket " + BucketName(shape) : "";
    reporter_.OnEvent(
        EventLevel::kInfo,
        "training FLOPs per clip" + of + ": " + std::to_string(flops / 1e12).substr(0, 5) +
            " TFLOP" +
            (peak > 0 ? "; GPU peak " + std::to_string(peak / 1e12).substr(0, 6) + " TFLOP/s"
                      : "; GPU peak unknown: no MFU (resources.peak_tflops)"));
  }
  return *scale;
}

int64_t StepMetrics::PeakMemory() const {
#if defined(ADCTL_WITH_CUDA)
  if (device_.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    return stats.allocated_bytes[0].peak;
  }
#endif
  return 0;
}

}  // namespace adctl
