// LoRA on the UNet's attention projections: MotionLoRA (the motion modules' attention, what
// AnimateDiff's MotionLoRAs cover) and, with scope `spatial`/`both`, the spatial transformers'
// (MotionDirector's spatial LoRA).
//
// PEFT's math: y = W x + (alpha / rank) · B (A x), A [rank, in] Kaiming-uniform (a = √5, as
// `nn.Linear` and PEFT initialise it), B [out, rank] zeros, so a fresh adapter leaves the model
// unchanged. The base weights stay as they are (frozen by the trainer); the adapters are fp32
// leaves of their own, attached to the `Attention` layers they adapt (layers.h: one slot per
// projection), so the motion adapter's state dict, its exports and the fused attention paths
// are unchanged.
//
// Names are diffusers' PEFT names: the module path (`down_blocks.0.motion_modules.0.
// transformer_blocks.0.attn1.to_q`) plus `.lora_A.weight` / `.lora_B.weight`; a diffusers LoRA
// file prefixes them with `unet.` and records rank, alpha and targets in its
// `lora_adapter_metadata`. Thread-compatible.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"

namespace adctl {

class UNet3DImpl;

// One adapted projection.
struct LoraLayer {
  torch::Tensor A;       // [rank, in], fp32, on the model's device
  torch::Tensor B;       // [out, rank]
  double scale = 1.0;    // alpha / rank
  double dropout = 0.0;  // on the adapter's input while the model trains (PEFT's lora_dropout)
  // scale · B (A x), in x's dtype; `training`: the adapted layer's train() mode.
  torch::Tensor Delta(const torch::Tensor& x, bool training) const;
};

// y + the adapters' terms: `layers` adapt the consecutive column blocks of y, each `width`
// wide (a null layer: that block has none; [q, k, v] of a fused projection), on input x. One
// thin GEMM and one GEMM that adds into y (addmm: no separate scale, add or concatenation):
// y + (x [A_1; A_2; …]ᵀ) · blockdiag(s_1 B_1, s_2 B_2, …)ᵀ. With dropout while training, each
// adapter draws its own mask (PEFT), term by term.
torch::Tensor AddLoraTerms(const torch::Tensor& y, const torch::Tensor& x,
                           const std::vector<const LoraLayer*>& layers, int64_t width,
                           bool training);

// The projections a target name selects, as diffusers names them.
class LoraAdapters {
 public:
  LoraAdapters() = default;

  // New adapters on every attention projection of `model` that `spec.targets` names (default:
  // DefaultLoraTargets) within `spec.scope`, A drawn from `seed` (the same on every rank and
  // device). Errors name the field: a target that matches no projection, a rank above a layer's
  // width.
  static Result<LoraAdapters> Attach(UNet3DImpl& model, const LoraSpec& spec, uint64_t seed);

  // Adapters read from a LoRA file and attached to the layers it names: diffusers' layout
  // (`unet.<module>.lora_A.weight`, rank and alpha from `lora_adapter_metadata`, alpha = rank
  // when absent) or AnimateDiff's MotionLoRA layout (`….processor.to_q_lora.down.weight`,
  // scale 1). Every tensor must match a projection of the model with the right shape.
  static Result<LoraAdapters> Load(UNet3DImpl& model, const std::string& path);

  // The adapter tensors (trainable leaves) by name: "<module>.lora_A.weight", "….lora_B.weight",
  // in the model's module order.
  std::vector<std::pair<std::string, torch::Tensor>> Parameters() const;
  // Copies the values of a checkpoint's LoRA file (DiffusersTensors(false) names) into the
  // adapters; every adapter must be there with its shape.
  Status Restore(const std::map<std::string, torch::Tensor>& diffusers_tensors);
  // Dropout on the adapters' input while training (init_from's adapters take the spec's).
  void SetDropout(double p);

  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  // The targets present ("to_q", …) and how many projections carry an adapter.
  const std::vector<std::string>& targets() const { return targets_; }
  size_t size() const { return layers_.size(); }
  int64_t parameter_count() const;
  bool empty() const { return layers_.empty(); }

  // diffusers' LoRA file: `unet.`-prefixed names, and the metadata its loader reads
  // (`lora_adapter_metadata`). `fold_alpha`: B scaled by alpha / rank and alpha recorded as
  // rank, so loaders that ignore the metadata (alpha = rank) compute the same model.
  std::map<std::string, torch::Tensor> DiffusersTensors(bool fold_alpha) const;
  std::map<std::string, std::string> DiffusersMetadata(bool fold_alpha) const;

 private:
  struct Entry {
    std::string module;  // "down_blocks.0.motion_modules.0.transformer_blocks.0.attn1.to_q"
    std::shared_ptr<LoraLayer> layer;
  };
  std::vector<Entry> layers_;
  int64_t rank_ = 0;
  double alpha_ = 0;
  std::vector<std::string> targets_;
};

}  // namespace adctl
