#include "worker/tools/parity.h"

#include <spdlog/spdlog.h>

#include "common/worker_contract.h"
#include "worker/model/clip_text.h"
#include "worker/model/vae.h"
#include "worker/model/weights.h"

namespace adctl {

namespace {

// Reads `in` and checks it holds `key`; logs and returns the exit code on failure.
int ReadInput(const std::string& in, const char* key, TensorMap& io) {
  auto read = ReadTensorFile(in);
  if (!read.ok()) {
    spdlog::error("{}", read.status().ToString());
    return kExitDataError;
  }
  if (!read->count(key)) {
    spdlog::error("{}: missing tensor '{}'", in, key);
    return kExitDataError;
  }
  io = std::move(*read);
  return kExitOk;
}

int Write(const std::string& out, const TensorMap& result) {
  auto st = WriteTensorFile(out, result);
  if (!st.ok()) {
    spdlog::error("{}", st.ToString());
    return kExitCrash;
  }
  std::string names;
  for (const auto& [name, t] : result) names += (names.empty() ? "" : ", ") + name;
  spdlog::info("wrote {} to {}", names, out);
  return kExitOk;
}

}  // namespace

int CheckTextEncoderParity(const std::string& dir, const std::string& in, const std::string& out) {
  auto model = LoadClipTextModel(dir);
  if (!model.ok()) {
    spdlog::error("{}", model.status().ToString());
    return kExitModelError;
  }
  TensorMap io;
  if (const int rc = ReadInput(in, "input_ids", io); rc != kExitOk) return rc;
  torch::NoGradGuard no_grad;
  auto result = (*model)->forward(io["input_ids"]);
  return Write(out, {{"last_hidden_state", result.last_hidden_state}, {"pooled", result.pooled}});
}

int CheckVaeParity(const std::string& dir, const std::string& in, const std::string& out) {
  auto vae = LoadAutoencoderKL(dir);
  if (!vae.ok()) {
    spdlog::error("{}", vae.status().ToString());
    return kExitModelError;
  }
  TensorMap io;
  if (const int rc = ReadInput(in, "image", io); rc != kExitOk) return rc;
  torch::NoGradGuard no_grad;
  auto dist = (*vae)->Encode(io["image"].to(torch::kFloat));
  auto decoded = (*vae)->Decode(dist.mean);
  return Write(out, {{"mean", dist.mean}, {"logvar", dist.logvar}, {"decoded", decoded}});
}

}  // namespace adctl
