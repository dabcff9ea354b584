// CLIP's byte-level alphabet (`bytes_to_unicode` in openai/CLIP `clip/simple_tokenizer.py`).
//
// Every byte maps to a visible, non-space Unicode character: printable Latin-1 bytes
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) to themselves, the other 68 bytes to U+0100.. in
// byte order. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace adctl {

// byte -> its character, UTF-8 encoded.
std::vector<std::string> BytesToUnicode();

// The first 512 tokens of CLIP's vocabulary: the byte characters in bytes_to_unicode's value
// order (the printable bytes, then the remapped ones), then the same with "</w>" appended.
std::vector<std::string> ClipBaseVocabulary();

}  // namespace adctl
