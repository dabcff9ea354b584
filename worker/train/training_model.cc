#include "worker/train/training_model.h"

#include <filesystem>

#include "common/job_layout.h"
#include "worker/model/pretrained.h"
#include "worker/model/weights.h"

namespace adctl {

std::optional<Failure> BuildTrainingModel(const TrainerOptions& options, torch::Device device,
                                          torch::ScalarType compute_dtype, UNet3D& model) {
  const auto& m = options.spec.model;
  if (m.preset != ModelPreset::kNone) {
    // Same seed on every rank: identical random weights everywhere. On a GPU the layers are
    // allocated there and initialised by its generator (seconds faster at the SD1.5 size
    // than LibTorch's CPU initialisation); on the CPU as LibTorch builds them.
    torch::manual_seed(static_cast<uint64_t>(options.spec.train.seed));
    {
      std::optional<DeferredInit> deferred;
      if (device.is_cuda()) deferred.emplace(device);
      model = m.preset == ModelPreset::kSd15
                  ? UNet3D(Sd15UNetConfig(), Sd15MotionConfig(m.preset_layout))
                  : UNet3D(TinyUNetConfig(), TinyMotionConfig(m.preset_layout));
    }
    if (device.is_cuda()) {
      model->to(device);
      InitializeLinearAndConv(*model);
    }
    model->ZeroInitMotionProjOut();
    if (m.motion_norm == MotionNorm::kPerFrame) model->set_norm_across_frames(false);
    // A trained motion module of the preset's shape (a LoRA benchmarked at the preset's size).
    if (!m.motion_adapter.empty() || !m.motion_module_file.empty()) {
      auto st = LoadMotionModules(*model, m.motion_adapter, m.motion_module_file);
      if (!st.ok()) return Failure{kExitModelError, st.ToString()};
      options.reporter->OnEvent(
          EventLevel::kInfo,
          "preset " + Name(m.preset) + " with the motion modules of " +
              (m.motion_module_file.empty() ? m.motion_adapter : m.motion_module_file));
    }
    // The tiny preset's frozen UNet is written out so its checkpoints load as a diffusers
    // pair; sd15's random 3.4 GB are not worth the disk.
    if (options.rank == 0 && m.preset == ModelPreset::kTiny) {
      const std::filesystem::path dir = JobLayout(options.job_dir).preset_unet2d();
      if (!std::filesystem::exists(dir / "config.json")) {
        auto st = SaveUNet2D(*model, dir.string());
        if (!st.ok()) return Failure{kExitCrash, st.ToString()};
      }
    }
  } else {
    ModelSources src{m.unet2d, m.motion_adapter, m.unet_motion, m.motion_module_file};
    if (!m.pretrained.empty()) {
      auto unet = PretrainedComponent(m.pretrained, "unet");
      if (!unet.ok()) return Failure{kExitModelError, unet.status().ToString()};
      src.unet2d = *unet;
    }
    auto loaded = LoadUNet3D(src, m.motion_norm);
    if (!loaded.ok()) return Failure{kExitModelError, loaded.status().ToString()};
    model = loaded->model;
    options.reporter->OnEvent(EventLevel::kInfo,
                              "model loaded; motion modules: " + loaded->motion_format);
  }
  // model.motion_max_frames: the loaded tables stretched to more frames (a change to the
  // modules, kept by their checkpoints and exports; a resume stretches the same base again).
  if (const int64_t table = model->motion_config().max_seq_length; m.motion_max_frames > table) {
    model->ExtendMotionPositions(m.motion_max_frames);
    options.reporter->OnEvent(
        EventLevel::kInfo,
        "motion modules' positional tables interpolated from " + std::to_string(table) + " to " +
            std::to_string(m.motion_max_frames) + " positions (model.motion_max_frames)");
  }
  model->set_gradient_checkpointing(m.gradient_checkpointing);
  model->FreezeAllButMotionModules();
  // A LoRA job freezes the motion modules too (only its adapters train; trainer.cc).
  if (m.lora.enabled()) {
    for (auto& p : model->parameters()) p.set_requires_grad(false);
  }
  model->to(device);
  // Frozen weights in the compute dtype (bf16 on GPU); trained motion modules stay fp32 masters.
  if (compute_dtype != torch::kFloat) {
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters(true)) {
      if (!item.value().requires_grad()) item.value().set_data(item.value().to(compute_dtype));
    }
  }
  // Channels-last feature maps where the fused kernels run (unet3d.h says what it saves).
  model->set_channels_last(device.is_cuda() && options.spec.train.fused_kernels);
  return std::nullopt;
}

}  // namespace adctl
