#include "server/supervisor/secrets.h"

#include <random>

namespace adctl {

std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < bytes; ++i) {
    unsigned v = rd() & 0xff;
    out += kHex[v >> 4];
    out += kHex[v & 15];
  }
  return out;
}

bool SameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace adctl
