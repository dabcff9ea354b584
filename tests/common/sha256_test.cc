#include "common/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

// FIPS 180-4 example vectors (NIST CSRC "SHA256.pdf" examples and the NESSIE/CAVP set).
TEST(Sha256Test, StandardVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, IncrementalMatchesOneShotAcrossBlockBoundaries) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>(i * 7 + 3);
  const std::string expected = Sha256Hex(data);
  for (size_t chunk : {1, 3, 55, 56, 63, 64, 65, 127, 999}) {
    Sha256 hasher;
    for (size_t i = 0; i < data.size(); i += chunk) hasher.Update(data.substr(i, chunk));
    EXPECT_EQ(hasher.HexDigest(), expected) << "chunk " << chunk;
  }
  // Padding edge cases: lengths around 55/56/64 bytes.
  EXPECT_EQ(Sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(Sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(Sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

// The SHA-extension rounds (used when the CPU has them) and the portable rounds agree on every
// length around the block and padding boundaries and on multi-block inputs fed in odd pieces.
TEST(Sha256Test, CpuExtensionsAgreeWithPortableRounds) {
  if (!Sha256::CpuHasShaExtensions()) GTEST_SKIP() << "this CPU has no SHA extensions";
  std::string data(70000, '\0');
  uint32_t x = 12345;
  for (char& c : data) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 1000, 4096, 65537, 70000}) {
    Sha256 fast, portable(/*allow_cpu_extensions=*/false);
    for (size_t i = 0; i < len; i += 777) {
      const size_t n = std::min<size_t>(777, len - i);
      fast.Update(data.data() + i, n);
      portable.Update(data.data() + i, n);
    }
    EXPECT_EQ(fast.HexDigest(), portable.HexDigest()) << "length " << len;
  }
  Sha256 portable(false);
  portable.Update("abc");
  EXPECT_EQ(portable.HexDigest(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, HasherResetsAfterDigest) {
  Sha256 hasher;
  hasher.Update("abc");
  EXPECT_EQ(hasher.HexDigest(), Sha256Hex("abc"));
  EXPECT_EQ(hasher.HexDigest(), Sha256Hex(""));
}

TEST(Sha256Test, File) {
  const TempDir tmp;
  const std::string path = tmp.file("sha256_test_file.bin");
  {
    std::ofstream out(path, std::ios::binary);
    std::string big(3 * 1024 * 1024 + 17, 'a');  // spans several read chunks
    out << big;
  }
  Result<std::string> hex = Sha256File(path);
  ASSERT_TRUE(hex.ok()) << hex.status().ToString();
  EXPECT_EQ(hex.value(), Sha256Hex(std::string(3 * 1024 * 1024 + 17, 'a')));
  std::remove(path.c_str());

  Result<std::string> missing = Sha256File(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace adctl
