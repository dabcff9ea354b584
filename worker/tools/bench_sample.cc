#include "worker/tools/bench_sample.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/job_spec.h"
#include "common/worker_contract.h"
#include "worker/compat.h"
#include "worker/diffusion/ddpm.h"
#include "worker/model/pretrained.h"
#include "worker/model/weights.h"
#include "worker/sample/validation.h"

#if defined(ADCTL_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace adctl {

namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int BenchSample(const BenchSampleOptions& o) {
  const auto t_load = std::chrono::steady_clock::now();
  const torch::Device device = compat::ComputeDevice();
  const torch::ScalarType dtype = compat::ComputeDtype(Precision::kAuto, device);
  auto unet_dir = PretrainedComponent(o.pretrained, "unet");
  if (!unet_dir.ok()) {
    spdlog::error("{}", unet_dir.status().ToString());
    return kExitModelError;
  }
  auto loaded = LoadUNet3D({*unet_dir, o.motion_adapter, "", ""}, MotionNorm::kPerFrame);
  if (!loaded.ok()) {
    spdlog::error("{}", loaded.status().ToString());
    return kExitModelError;
  }
  UNet3D unet = loaded->model;
  unet->FreezeAllButMotionModules();
  unet->to(device);
  {
    // As training holds it: frozen weights in the compute dtype, motion modules fp32.
    torch::NoGradGuard no_grad;
    for (auto& item : unet->named_parameters(true)) {
      if (!item.value().requires_grad()) item.value().set_data(item.value().to(dtype));
    }
  }
  unet->eval();

  JobSpec spec;
  spec.model.pretrained = o.pretrained;
  ValidationSpec& v = spec.validation;
  v.prompts = {"a panda surfing a wave, high quality"};
  v.frames = o.frames;
  v.height = o.height;
  v.width = o.width;
  v.steps = o.steps;
  v.guidance = o.guidance;
  auto schedule =
      NoiseSchedule::Make(BetaSchedule::kScaledLinear, 0.00085, 0.012, 1000);  // SD1.5's
  if (!schedule.ok()) {
    spdlog::error("{}", schedule.status().ToString());
    return kExitCrash;
  }
  const std::string scratch = std::filesystem::temp_directory_path() / "adctl-bench-sample";
  auto renderer = ValidationRenderer::Make(spec, *unet, *schedule, PredictionType::kEpsilon, device,
                                           dtype, scratch);
  if (!renderer.ok()) {
    spdlog::error("{}", renderer.status().ToString());
    return renderer.status().code() == StatusCode::kInvalidArgument ? kExitBadSpec
                                                                    : kExitModelError;
  }
  const double load_seconds = Since(t_load);

  nlohmann::json runs = nlohmann::json::array();
  for (int i = 0; i < o.repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    RgbFrames clip = (*renderer)->SampleClip(*unet, 0);  // ends with a copy to the host
    runs.push_back(Since(t0));
    spdlog::info("sample {}: {:.3f} s ({} frames {}x{})", i, runs.back().get<double>(),
                 clip.num_frames, clip.width, clip.height);
  }
  int64_t peak = 0;
#if defined(ADCTL_WITH_CUDA)
  if (device.is_cuda()) {
    peak = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;
  }
#endif
  const nlohmann::json result = {
      {"device", device.str()},
      {"dtype", dtype == torch::kBFloat16 ? "bf16" : "fp32"},
      {"frames", o.frames},
      {"height", o.height},
      {"width", o.width},
      {"steps", o.steps},
      {"guidance", o.guidance},
      {"unet_passes_per_step", o.guidance > 1 ? 2 : 1},
      {"load_seconds", load_seconds},
      {"sample_seconds", runs},
      {"peak_memory_bytes", peak},
  };
  std::cout << result.dump() << std::endl;
  if (!o.out.empty()) std::ofstream(o.out) << result.dump(2) << "\n";
  return kExitOk;
}

}  // namespace adctl
