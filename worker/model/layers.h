// The SD UNet's building blocks, registered under diffusers' exact parameter names:
// timestep embedding, ResnetBlock2D, attention (self and cross), GEGLU feed-forward,
// BasicTransformerBlock, Transformer2DModel (spatial), Downsample2D and Upsample2D.
//
// Activations are [(B·F), C, H, W] (frames folded into the batch) or tokens [N, L, C]. Every
// forward computes in the input's dtype: weights stored in another dtype (fp32 trainable
// motion modules under bf16 activations) are cast on the fly, so autograd reaches the fp32
// master weights. Reference: diffusers models/resnet.py, attention.py, attention_processor.py,
// transformers/transformer_2d.py, embeddings.py.
#pragma once

#include <torch/torch.h>

namespace adctl {

// Every Linear and Conv2d of the models is built by these. While a DeferredInit lives on the
// thread, they are allocated on its device and left uninitialised (torch::empty), for
// InitializeLinearAndConv to fill there or a weight file to overwrite: LibTorch's modules
// initialise in their constructors, on the CPU, with a serial random generator, which took 7-12
// s of a rank's start-up for the SD1.5 UNet (bench/results/speed_h200_20261202.md).
torch::nn::Linear MakeLinear(const torch::nn::LinearOptions& options);
torch::nn::Conv2d MakeConv2d(const torch::nn::Conv2dOptions& options);

class DeferredInit {
 public:
  explicit DeferredInit(torch::Device device);
  ~DeferredInit();
  DeferredInit(const DeferredInit&) = delete;
  DeferredInit& operator=(const DeferredInit&) = delete;

 private:
  const torch::Device* previous_;
  torch::Device device_;
};

// LibTorch's default initialisation of every Linear and Conv2d under `module` (weights
// kaiming_uniform_ with a = √5, biases U(±1/√fan_in)), where their parameters are, with that
// device's random generator.
void InitializeLinearAndConv(torch::nn::Module& module);

// Casting helpers: compute in x's dtype whatever the stored weight dtype.
torch::Tensor LinearIn(const torch::nn::Linear& layer, const torch::Tensor& x);
// with_bias false: without the layer's bias (the caller adds it elsewhere); `bias`, when defined,
// replaces it.
torch::Tensor Conv2dIn(const torch::nn::Conv2d& layer, const torch::Tensor& x,
                       bool with_bias = true, const torch::Tensor& bias = {});
torch::Tensor GroupNormIn(const torch::nn::GroupNorm& layer, const torch::Tensor& x);
// SiLU(GroupNorm(x)), fused on GPUs (worker/kernels/group_norm.h).
torch::Tensor GroupNormSiluIn(const torch::nn::GroupNorm& layer, const torch::Tensor& x);
// {GroupNorm(x) (+ SiLU), x} for an x used again (residual, shortcut): the second is that use's
// x, whose gradient the channels-last kernels add in the norm's backward (GroupNormResidual).
std::pair<torch::Tensor, torch::Tensor> GroupNormResidualIn(const torch::nn::GroupNorm& layer,
                                                            const torch::Tensor& x, bool silu);
// LayerNorm over the last dimension, + `add` ([P, C], row r of x taking add's row
// (r / repeat) mod P) where given: the fused kernel on CUDA (the parameters read in their stored
// dtype), LibTorch's layer_norm otherwise.
torch::Tensor LayerNormIn(const torch::nn::LayerNorm& layer, const torch::Tensor& x,
                          const torch::Tensor& add = {}, int64_t repeat = 1);
// {LayerNormIn(layer, x, add), x} for x + f(LayerNorm(x)): the second is the residual to add,
// whose gradient the fused kernel sums with the norm's (worker/kernels/layer_norm.h,
// LayerNormResidual).
std::pair<torch::Tensor, torch::Tensor> LayerNormResidualIn(const torch::nn::LayerNorm& layer,
                                                            const torch::Tensor& x,
                                                            const torch::Tensor& add = {},
                                                            int64_t repeat = 1);

// Sinusoidal timestep features, [B] → [B, dim], fp32 (diffusers get_timestep_embedding).
torch::Tensor TimestepFeatures(const torch::Tensor& timesteps, int64_t dim, bool flip_sin_to_cos,
                               double freq_shift);

// time_embedding.linear_1 → SiLU → linear_2.
class TimestepEmbeddingImpl : public torch::nn::Module {
 public:
  TimestepEmbeddingImpl(int64_t in_dim, int64_t out_dim);
  torch::Tensor forward(const torch::Tensor& features);
  torch::nn::Linear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(TimestepEmbedding);

// norm1 → SiLU → conv1 → + time_emb_proj(SiLU(emb)) → norm2 → SiLU → conv2, + shortcut.
class ResnetBlock2DImpl : public torch::nn::Module {
 public:
  ResnetBlock2DImpl(int64_t in_channels, int64_t out_channels, int64_t temb_channels,
                    int64_t groups, double eps);
  // x [(B·F), Cin, H, W]; emb [B, temb] (one per clip, broadcast to its frames).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& emb, int64_t num_frames);
  torch::nn::GroupNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};
  torch::nn::Linear time_emb_proj{nullptr};
};
TORCH_MODULE(ResnetBlock2D);

struct LoraLayer;  // lora.h

// Multi-head attention: to_q, to_k, to_v (no bias), to_out.0 (bias).
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t query_dim, int64_t context_dim, int64_t heads, int64_t head_dim);
  // x [N, Lq, C]; context [N, Lk, Cctx] or undefined for self-attention. When context has
  // fewer rows than x (one per clip) and `repeat` > 1, K and V are computed per clip and
  // repeated `repeat` times (frames of a clip see the same text). Self-attention also takes a
  // channels-last clip's rows x [B, L, P, C] (the B·P sequences over L interleaved, a motion
  // module's frames of each pixel) and returns the same layout.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context = {},
                        int64_t repeat = 1);
  // The LoRA adapter of a projection ("to_q", "to_k", "to_v", "to_out.0"); null: none (lora.h
  // attaches them). Null for an unknown name.
  std::shared_ptr<LoraLayer>* LoraSlot(const std::string& projection);
  // The projection's base weight (the shapes an adapter must fit).
  const torch::Tensor& ProjectionWeight(const std::string& projection) const;
  int64_t heads;
  torch::nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out;
  torch::nn::Linear out_proj{nullptr};  // to_out.0
  std::shared_ptr<LoraLayer> lora_q, lora_k, lora_v, lora_out;

 private:
  // x's projection by `layer`, plus its adapter's term when it has one (its dropout while the
  // module trains).
  torch::Tensor Project(const torch::nn::Linear& layer, const std::shared_ptr<LoraLayer>& lora,
                        const torch::Tensor& x) const;
};
TORCH_MODULE(Attention);

// ff.net.0.proj (C → 2·inner, GEGLU: a · GELU(gate)), ff.net.1 (dropout 0), ff.net.2.
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, int64_t mult = 4);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear proj{nullptr}, out{nullptr};
  torch::nn::ModuleList net;
};
TORCH_MODULE(FeedForward);

// Spatial BasicTransformerBlock: self-attn, cross-attn on text, GEGLU, pre-LayerNorm.
class SpatialTransformerBlockImpl : public torch::nn::Module {
 public:
  SpatialTransformerBlockImpl(int64_t dim, int64_t heads, int64_t context_dim);
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& context, int64_t repeat);
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  Attention attn1{nullptr}, attn2{nullptr};
  FeedForward ff{nullptr};
};
TORCH_MODULE(SpatialTransformerBlock);

// Transformer2DModel: GroupNorm(eps 1e-6) → proj_in (1×1 conv or linear) → blocks → proj_out,
// plus the residual.
class Transformer2DImpl : public torch::nn::Module {
 public:
  Transformer2DImpl(int64_t channels, int64_t heads, int64_t context_dim, int64_t groups,
                    bool linear_projection);
  // x [(B·F), C, H, W]; context [B, L, D] per clip.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, int64_t num_frames);
  bool linear_projection;
  torch::nn::GroupNorm norm{nullptr};
  torch::nn::AnyModule proj_in, proj_out;
  torch::nn::ModuleList transformer_blocks;
};
TORCH_MODULE(Transformer2D);

// 3×3 conv with stride 2.
class Downsample2DImpl : public torch::nn::Module {
 public:
  Downsample2DImpl(int64_t channels, int64_t padding);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE(Downsample2D);

// Nearest-neighbour upsampling to `size` (×2 normally), then a 3×3 conv.
class Upsample2DImpl : public torch::nn::Module {
 public:
  explicit Upsample2DImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& x, std::vector<int64_t> size);
  torch::nn::Conv2d conv{nullptr};
};
TORCH_MODULE(Upsample2D);

}  // namespace adctl
