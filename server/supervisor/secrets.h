// Secrets adctld hands out: random tokens (it keeps their common/sha256.h Sha256Hex instead).
#pragma once

#include <string>

#include "common/sha256.h"

namespace adctl {

// `bytes` random bytes from std::random_device, as 2 × bytes lowercase hex digits.
std::string RandomHex(int bytes);
// Equal strings, compared without an early exit (for digests).
bool SameSecret(const std::string& a, const std::string& b);

}  // namespace adctl
