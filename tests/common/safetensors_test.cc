#include "common/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/json_errors.h"
#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

const std::string kSecret = "root:$y$j9T$SECRETHASH:19700:0:99999:7:::\n";

std::string Write(const TempDir& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// A spec may name any file as a motion module or a model: its bytes never come back in the
// message (neither as text nor as the header length read from its first 8 bytes).
TEST(SafetensorsTest, AnOtherKindOfFileIsNamedNotQuoted) {
  TempDir dir;
  const std::string path = Write(dir, "shadow", kSecret);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kDataLoss);
  const std::string message = file.status().message();
  EXPECT_NE(message.find(path + ": not a safetensors file"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(kSecret.size()) + " bytes"), std::string::npos) << message;
  uint64_t as_length = 0;
  for (int i = 7; i >= 0; --i) as_length = (as_length << 8) | static_cast<uint8_t>(kSecret[i]);
  EXPECT_EQ(message.find(std::to_string(as_length)), std::string::npos) << message;
  EXPECT_EQ(message.find("root"), std::string::npos) << message;
}

TEST(SafetensorsTest, AHeaderThatIsNotJsonGivesItsPositionNotItsText) {
  TempDir dir;
  std::string bytes(8, '\0');
  const std::string header = "{\"SECRETHASH\" oops}";
  bytes[0] = static_cast<char>(header.size());
  const std::string path = Write(dir, "bad.safetensors", bytes + header);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  const std::string message = file.status().message();
  EXPECT_NE(message.find("not valid JSON (syntax error at byte"), std::string::npos) << message;
  EXPECT_EQ(message.find("SECRETHASH"), std::string::npos) << message;
  EXPECT_EQ(message.find("oops"), std::string::npos) << message;
}

TEST(JsonErrorsTest, ParseErrorsLoseTheirQuotedBytesOtherErrorsKeepTheirText) {
  try {
    const nlohmann::json parsed = nlohmann::json::parse(kSecret);
    FAIL() << "parsed: " << parsed.dump();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("last read: 'r"), std::string::npos)
        << "nlohmann quotes the bytes: " << e.what();
    EXPECT_EQ(JsonErrorWithoutContent(e), "not valid JSON (syntax error at byte 1)");
  }
  try {
    const std::string a = nlohmann::json::parse("{\"a\": 1}").at("a").get<std::string>();
    FAIL() << "converted: " << a;
  } catch (const std::exception& e) {
    EXPECT_NE(JsonErrorWithoutContent(e).find("type must be string"), std::string::npos)
        << JsonErrorWithoutContent(e);
  }
}

}  // namespace
}  // namespace adctl
