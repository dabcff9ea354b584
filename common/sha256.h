// SHA-256 (FIPS 180-4), hex output. Used for checkpoint manifests and data shard checks.
//
// Sha256 is an incremental hasher (not thread-safe; one per thread); the free functions are
// thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace adctl {

class Sha256 {
 public:
  // Uses the x86 SHA extensions when the CPU has them (about 7x faster: checkpoints of
  // several GB are hashed in seconds), the portable FIPS 180-4 rounds otherwise.
  // `allow_cpu_extensions = false` forces the portable rounds (tests compare the two).
  explicit Sha256(bool allow_cpu_extensions = true);
  // Whether this CPU has the SHA extensions (and this build can use them).
  static bool CpuHasShaExtensions();
  void Update(const void* data, size_t size);
  void Update(const std::string& data) { Update(data.data(), data.size()); }
  // Finishes and returns the 32-byte digest; the hasher is then reset for reuse.
  std::array<uint8_t, 32> Digest();
  // Finishes and returns the digest as 64 lowercase hex characters; resets like Digest().
  std::string HexDigest();

 private:
  void Reset();
  // Compresses `blocks` consecutive 64-byte blocks into state_.
  void Compress(const uint8_t* data, size_t blocks);

  bool use_sha_extensions_;
  std::array<uint32_t, 8> state_;
  uint8_t buffer_[64];
  size_t buffer_size_ = 0;
  uint64_t total_bytes_ = 0;
};

// Lowercase hex SHA-256 of a byte buffer.
std::string Sha256Hex(const void* data, size_t size);
std::string Sha256Hex(const std::string& data);
// Lowercase hex SHA-256 of a file's contents, read in chunks (constant memory).
// NotFound if the file cannot be opened, DataLoss on a read error.
Result<std::string> Sha256File(const std::string& path);

}  // namespace adctl
