// Small string helpers shared by common/ (Torch-free, header-only).
#pragma once

#include <string>

namespace adctl {

inline bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace adctl
