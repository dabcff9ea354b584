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
                              const LatentShape& shape) {
  unet_ = unet;
  motion_ = motion;
  shape_ = shape;
}

bool StepMetrics::Due(int64_t step) const {
  return step % std::max<int64_t>(1, train_.log_every) == 0 || step == train_.max_steps;
}

void StepMetrics::Report(StepReport r) {
  const int64_t global_batch = train_.batch_size * train_.grad_accum * world_size_;
  r.total_steps = train_.max_steps;
  r.clips_per_second = global_batch / r.step_seconds;
  r.peak_memory_bytes = PeakMemory();
  r.mfu_ratio = Mfu(r.clips_per_second / std::max(1, world_size_));
  r.time = NowSeconds();
  SetDeviceValues(device_sampler_.Sample(), &r);
  reporter_.OnStep(r);
}

double StepMetrics::Mfu(double clips_per_second) {
  if (!device_.is_cuda()) return 0;
  if (!mfu_scale_) {
    const double flops =
        CountTrainingFlops(unet_, motion_, shape_.frames, shape_.height, shape_.width).PerClip();
    double peak = peak_tflops_ * 1e12;
#if defined(ADCTL_WITH_CUDA)
    if (peak <= 0) peak = DenseBf16PeakFlops(at::cuda::getDeviceProperties(device_.index())->name);
#endif
    mfu_scale_ = peak > 0 ? flops / peak : 0;
    reporter_.OnEvent(
        EventLevel::kInfo,
        "training FLOPs per clip: " + std::to_string(flops / 1e12).substr(0, 5) + " TFLOP" +
            (peak > 0 ? "; GPU peak " + std::to_string(peak / 1e12).substr(0, 6) + " TFLOP/s"
                      : "; GPU peak unknown: no MFU (resources.peak_tflops)"));
  }
  return *mfu_scale_ * clips_per_second;
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
