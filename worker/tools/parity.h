// `adworker check-parity`: run a model, a training step sequence or the sampler on a reference
// input file and write what it computes, for comparison with diffusers/transformers/PyTorch.
// Inputs and outputs are safetensors with the names of tests/fixtures/diffusers-tiny. Each
// Check* function logs what it did and returns an exit code (common/worker_contract.h); the
// Run* functions are what the CPU tests call.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "worker/model/vae.h"
#include "worker/model/weights.h"

namespace adctl {

// --text-encoder DIR: `input_ids` [B, L] → `last_hidden_state`, `pooled`.
int CheckTextEncoderParity(const std::string& dir, const std::string& in, const std::string& out);
// --vae DIR: `image` [N, 3, H, W] in [−1, 1] → `mean`, `logvar`, `decoded` = decode(mean).
int CheckVaeParity(const std::string& dir, const std::string& in, const std::string& out);
// --unet-motion / --unet2d [+ --motion-adapter] with --io: `sample`, `timesteps`,
// `encoder_hidden_states`, `target` → `pred`, `loss` (MSE) and the motion parameters' gradients.
int CheckUNetParity(const ModelSources& sources, const std::string& in, const std::string& out);
// The same with a LoRA file (--motion-lora: diffusers' or AnimateDiff's layout) on the frozen
// model: `pred`, `loss` and the gradient of every LoRA tensor under its diffusers name
// (`unet.<module>.lora_A.weight`, as in a diffusers LoRA file).
int CheckMotionLoraParity(const ModelSources& sources, const std::string& lora,
                          const std::string& in, const std::string& out);

// The optimizer and schedule against torch.optim.AdamW + clip_grad_norm_ + diffusers'
// constant_with_warmup: `steps` optimizer steps on the same `io` batch (forward, MSE, backward,
// clip, AdamW step at LearningRate(step)); the spec's train section gives the hyper-parameters.
struct AdamWParityOptions {
  int64_t steps = 3;
  double lr = 1e-3;
  int64_t warmup_steps = 2;
  double max_grad_norm = 1.0;
  double weight_decay = 1e-2;
  bool release_grads = false;  // AdamW::ZeroGrad(release): the trainer's single-rank eager way
};
// → `loss.N`, `lr.N` (fp64), `grad_norm.N` (before clipping), `param.<name>` after the last step.
Result<TensorMap> RunAdamWSteps(UNet3DImpl& model, const TensorMap& io,
                                const AdamWParityOptions& options);
int CheckAdamWParity(const ModelSources& sources, const std::string& in,
                     const AdamWParityOptions& options, const std::string& out);

// --unet-motion DIR --vae DIR --sampling-io FILE: `latents_init`, `prompt_embeds`,
// `negative_prompt_embeds` and `sampling` (the fixture README.json's section: steps, guidance,
// eta, set_alpha_to_one per run name) → `<run>.latents`, `<run>.video`, `<run>.timesteps` for
// each run ("alpha1", "alpha0"). The scheduler is AnimateDiff's (linear 0.00085–0.012,
// steps_offset 1, leading spacing, ε-prediction).
Result<TensorMap> RunSamplingParity(UNet3DImpl& unet, AutoencoderKLImpl& vae, const TensorMap& io,
                                    const nlohmann::json& sampling);
int CheckSamplingParity(const ModelSources& sources, const std::string& vae_dir,
                        const std::string& in, const std::string& out);

}  // namespace adctl
