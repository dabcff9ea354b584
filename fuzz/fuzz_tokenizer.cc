// Captions come from users' CSVs: any bytes must tokenize to sot … eot padded to 77 ids, each a
// vocabulary id.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "worker/text/clip_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const adctl::ClipTokenizer* tokenizer = [] {
    auto loaded = adctl::ClipTokenizer::Load(ADCTL_FUZZ_VOCAB);
    if (!loaded.ok()) std::abort();
    return new adctl::ClipTokenizer(std::move(loaded.value()));
  }();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<int> ids = tokenizer->EncodePadded(text);
  if (ids.size() != static_cast<size_t>(adctl::ClipTokenizer::kMaxLength)) std::abort();
  for (int id : ids) {
    if (id < 0 || id >= tokenizer->vocab_size()) std::abort();
  }
  tokenizer->Encode(text);
  return 0;
}
