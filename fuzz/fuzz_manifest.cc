// A checkpoint's manifest.json is read back on resume and export: any JSON must give a manifest
// or an error, never a crash.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "common/checkpoint_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  auto manifest = adctl::CheckpointManifest::FromJson(json);
  if (!manifest.ok() && manifest.status().message().empty()) std::abort();
  return 0;
}
