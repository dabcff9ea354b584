// Job specs come from users: any text must give a spec or an error, and an accepted spec must
// survive its own canonical YAML (what adctld stores and ranks read back).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = adctl::ParseJobSpec(text);
  if (!spec.ok()) {
    if (spec.status().message().empty()) std::abort();  // every error says what is wrong
    return 0;
  }
  const std::string yaml = adctl::JobSpecToYaml(spec.value());
  auto again = adctl::ParseJobSpec(yaml);
  if (!again.ok() || adctl::JobSpecToYaml(again.value()) != yaml) {
    std::fprintf(stderr, "canonical YAML does not round-trip: %s\n%s\n",
                 again.ok() ? "differs" : again.status().message().c_str(), yaml.c_str());
    std::abort();
  }
  return 0;
}
