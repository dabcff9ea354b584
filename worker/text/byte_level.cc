#include "worker/text/byte_level.h"

namespace adctl {
namespace {

bool MapsToItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::string Utf8(int cp) {  // cp < 0x800 here
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

}  // namespace

std::vector<std::string> BytesToUnicode() {
  std::vector<std::string> out(256);
  int n = 0;
  for (int b = 0; b < 256; ++b) out[b] = Utf8(MapsToItself(b) ? b : 256 + n++);
  return out;
}

std::vector<std::string> ClipBaseVocabulary() {
  std::vector<std::string> table = BytesToUnicode();
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) {
    if (MapsToItself(b)) vocab.push_back(table[b]);
  }
  for (int b = 0; b < 256; ++b) {
    if (!MapsToItself(b)) vocab.push_back(table[b]);
  }
  for (int i = 0; i < 256; ++i) vocab.push_back(vocab[i] + "</w>");
  return vocab;
}

}  // namespace adctl
