// The Stable Diffusion components around the UNet against the reference fixtures
// (tests/fixtures/diffusers-tiny): transformers' CLIPTextModel and diffusers' AutoencoderKL,
// plus their loaders' handling of the layouts users have (fp16 variants, legacy key names).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"
#include "worker/model/clip_text.h"
#include "worker/model/vae.h"
#include "worker/model/weights.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = std::string(ADCTL_FIXTURES_DIR) + "/diffusers-tiny";

double RelativeError(const torch::Tensor& out, const torch::Tensor& ref) {
  return ((out - ref).norm() / ref.norm()).item<double>();
}

TEST(ClipTextModel, MatchesTransformers) {
  auto model = LoadClipTextModel(kFixtures + "/text_encoder");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto io = ReadTensorFile(kFixtures + "/text_encoder_io.safetensors");
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  torch::NoGradGuard no_grad;
  auto out = (*model)->forward(io->at("input_ids"));
  const double e_hidden = RelativeError(out.last_hidden_state, io->at("last_hidden_state"));
  const double e_pooled = RelativeError(out.pooled, io->at("pooled"));
  std::printf("text encoder: last_hidden_state %.3g, pooled %.3g\n", e_hidden, e_pooled);
  EXPECT_LT(e_hidden, 1e-4);
  EXPECT_LT(e_pooled, 1e-4);
}

TEST(ClipTextModel, ReadsPrefixedFp16VariantAndGeluConfig) {
  TempDir dir;
  auto tensors = ReadTensorFile(kFixtures + "/text_encoder/model.safetensors");
  ASSERT_TRUE(tensors.ok());
  TensorMap prefixed;
  for (auto& [k, t] : *tensors) prefixed["text_model." + k] = t.to(torch::kHalf);
  prefixed["text_model.embeddings.position_ids"] = torch::arange(77).unsqueeze(0);
  ASSERT_TRUE(WriteTensorFile(dir.file("model.fp16.safetensors"), prefixed).ok());
  fs::copy_file(kFixtures + "/text_encoder/config.json", dir.file("config.json"));
  auto model = LoadClipTextModel(dir.path());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto io = ReadTensorFile(kFixtures + "/text_encoder_io.safetensors");
  torch::NoGradGuard no_grad;
  auto out = (*model)->forward(io->at("input_ids"));
  // fp16 storage rounds the weights: close, not exact.
  EXPECT_LT(RelativeError(out.last_hidden_state, io->at("last_hidden_state")), 1e-2);
}

TEST(ClipTextModel, ErrorsNameTheProblem) {
  TempDir dir;
  auto missing = LoadClipTextModel(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("config.json"), std::string::npos)
      << missing.status().ToString();
  std::ofstream(dir.file("config.json")) << R"({"hidden_act": "relu"})";
  auto bad = LoadClipTextModel(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("hidden_act 'relu'"), std::string::npos);
}

TEST(AutoencoderKL, MatchesDiffusers) {
  auto vae = LoadAutoencoderKL(kFixtures + "/vae");
  ASSERT_TRUE(vae.ok()) << vae.status().ToString();
  EXPECT_DOUBLE_EQ((*vae)->config().scaling_factor, 0.18215);
  auto io = ReadTensorFile(kFixtures + "/vae_io.safetensors");
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  torch::NoGradGuard no_grad;
  auto dist = (*vae)->Encode(io->at("image"));
  auto decoded = (*vae)->Decode(dist.mean);
  const double e_mean = RelativeError(dist.mean, io->at("mean"));
  const double e_logvar = RelativeError(dist.logvar, io->at("logvar"));
  const double e_dec = RelativeError(decoded, io->at("decoded"));
  std::printf("vae: mean %.3g, logvar %.3g, decoded %.3g\n", e_mean, e_logvar, e_dec);
  EXPECT_LT(e_mean, 1e-4);
  EXPECT_LT(e_logvar, 1e-4);
  EXPECT_LT(e_dec, 1e-4);
  // Chunked encoding and decoding give the same numbers.
  auto chunked = (*vae)->EncodeChunked(io->at("image"), 1);
  EXPECT_LT(RelativeError(chunked.mean, dist.mean), 1e-5);
  EXPECT_LT(RelativeError((*vae)->DecodeChunked(dist.mean, 1), decoded), 1e-5);
}

TEST(AutoencoderKL, ReadsLegacyAttentionNames) {
  TempDir dir;
  auto tensors = ReadTensorFile(kFixtures + "/vae/diffusion_pytorch_model.safetensors");
  ASSERT_TRUE(tensors.ok());
  TensorMap legacy;
  for (auto& [k, t] : *tensors) {
    std::string key = k;
    for (auto [from, to] : {std::pair{"to_q.", "query."},
                            {"to_k.", "key."},
                            {"to_v.", "value."},
                            {"to_out.0.", "proj_attn."}}) {
      const auto pos = key.find(from);
      if (pos != std::string::npos) key.replace(pos, std::strlen(from), to);
    }
    legacy[key] = t;
  }
  ASSERT_TRUE(WriteTensorFile(dir.file("diffusion_pytorch_model.safetensors"), legacy).ok());
  fs::copy_file(kFixtures + "/vae/config.json", dir.file("config.json"));
  auto vae = LoadAutoencoderKL(dir.path());
  ASSERT_TRUE(vae.ok()) << vae.status().ToString();
  auto io = ReadTensorFile(kFixtures + "/vae_io.safetensors");
  torch::NoGradGuard no_grad;
  EXPECT_LT(RelativeError((*vae)->Encode(io->at("image")).mean, io->at("mean")), 1e-4);
}

TEST(AutoencoderKL, MissingWeightsListWhatIsThere) {
  TempDir dir;
  fs::copy_file(kFixtures + "/vae/config.json", dir.file("config.json"));
  std::ofstream(dir.file("diffusion_pytorch_model.bin")) << "pickle";
  auto vae = LoadAutoencoderKL(dir.path());
  ASSERT_FALSE(vae.ok());
  EXPECT_NE(vae.status().message().find("diffusion_pytorch_model.bin"), std::string::npos)
      << vae.status().ToString();
}

const std::string kAnimateDiff = std::string(ADCTL_FIXTURES_DIR) + "/animatediff-tiny";

// Keys mapped to diffusers names, as LoadUNet3D uses them.
TensorMap Mapped(const TensorMap& raw) {
  TensorMap out;
  for (const auto& [k, t] : raw) {
    const auto key = AnimateDiffKeyToDiffusers(k);
    if (!key.empty()) out[key] = t;
  }
  return out;
}

TEST(MotionModuleFile, CkptEqualsItsSafetensorsTwin) {
  auto st = ReadMotionModuleFile(kAnimateDiff + "/mm_tiny.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const auto reference = Mapped(*st);
  ASSERT_EQ(reference.size(), 286u);  // the MotionAdapter's 297 less its 11 pe tables
  for (const char* name : {"mm_tiny.ckpt", "mm_tiny_wrapped.ckpt"}) {
    auto ckpt = ReadMotionModuleFile(kAnimateDiff + "/" + name);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    const auto mapped = Mapped(*ckpt);
    ASSERT_EQ(mapped.size(), reference.size()) << name;
    for (const auto& [k, t] : reference) {
      ASSERT_TRUE(mapped.count(k)) << name << ": " << k;
      EXPECT_TRUE(torch::equal(mapped.at(k), t)) << name << ": " << k;
    }
  }
}

TEST(MotionModuleFile, LoadsIntoTheUNetLikeTheAdapter) {
  ModelSources from_adapter{kFixtures + "/unet2d", kFixtures + "/motion_adapter", "", ""};
  ModelSources from_ckpt{kFixtures + "/unet2d", kFixtures + "/motion_adapter", "",
                         kAnimateDiff + "/mm_tiny_wrapped.ckpt"};
  auto a = LoadUNet3D(from_adapter, MotionNorm::kAcrossFrames);
  auto b = LoadUNet3D(from_ckpt, MotionNorm::kAcrossFrames);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->motion_format, "animatediff");
  auto pa = a->model->named_parameters(true);
  auto pb = b->model->named_parameters(true);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
}

TEST(MotionModuleFile, NeitherFormatSaysSoWithoutEchoingTheFile) {
  TempDir dir;
  const auto text = dir.file("mm.ckpt");
  std::ofstream(text) << "<html>not found</html>";
  auto r = ReadMotionModuleFile(text);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("neither safetensors"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("(22 bytes)"), std::string::npos) << r.status().ToString();
  // Its contents never reach the job's events (it may be any file adctld can read).
  EXPECT_EQ(r.status().message().find("<html>"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(ReadMotionModuleFile(dir.file("absent.ckpt")).status().code(), StatusCode::kNotFound);
  // A UNet file instead of a motion module: the loader says which tensors it holds.
  ModelSources wrong{kFixtures + "/unet2d", "", "",
                     kFixtures + "/unet2d/diffusion_pytorch_model.safetensors"};
  auto loaded = LoadUNet3D(wrong, MotionNorm::kAuto);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("no AnimateDiff motion-module tensors"),
            std::string::npos)
      << loaded.status().ToString();
}

}  // namespace
}  // namespace adctl
