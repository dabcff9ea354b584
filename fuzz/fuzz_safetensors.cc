// Weights files come from users (downloads): any bytes must open as tensors that lie inside the
// file, or fail with an error. Each input is written to a file and mapped, as adworker does.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/adctl-fuzz-" + std::to_string(getpid()) + ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  auto file = adctl::SafetensorsFile::Open(path);
  if (!file.ok()) {
    if (file.status().message().empty()) std::abort();
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const adctl::TensorInfo& t : (*file)->tensors()) {
    size_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<size_t>(d);
    if (elements * adctl::DTypeSize(t.dtype) != t.nbytes) std::abort();
    for (size_t i = 0; i < t.nbytes; ++i) sink = sink ^ t.data[i];  // ASan: inside the mapping
    if ((*file)->Find(t.name) == nullptr) std::abort();
  }
  return 0;
}
