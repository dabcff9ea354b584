#include "worker/text/text_clean.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace adctl {
namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// ISO 8859-1 entity names for U+00A0..U+00FF, in code point order. HTML5 accepts all of them
// without the trailing ';' (Python's html.entities.html5 lists both forms).
constexpr const char* kLatin1Names[96] = {
    "nbsp",   "iexcl",  "cent",   "pound",  "curren", "yen",    "brvbar", "sect",   "uml",
    "copy",   "ordf",   "laquo",  "not",    "shy",    "reg",    "macr",   "deg",    "plusmn",
    "sup2",   "sup3",   "acute",  "micro",  "para",   "middot", "cedil",  "sup1",   "ordm",
    "raquo",  "frac14", "frac12", "frac34", "iquest", "Agrave", "Aacute", "Acirc",  "Atilde",
    "Auml",   "Aring",  "AElig",  "Ccedil", "Egrave", "Eacute", "Ecirc",  "Euml",   "Igrave",
    "Iacute", "Icirc",  "Iuml",   "ETH",    "Ntilde", "Ograve", "Oacute", "Ocirc",  "Otilde",
    "Ouml",   "times",  "Oslash", "Ugrave", "Uacute", "Ucirc",  "Uuml",   "Yacute", "THORN",
    "szlig",  "agrave", "aacute", "acirc",  "atilde", "auml",   "aring",  "aelig",  "ccedil",
    "egrave", "eacute", "ecirc",  "euml",   "igrave", "iacute", "icirc",  "iuml",   "eth",
    "ntilde", "ograve", "oacute", "ocirc",  "otilde", "ouml",   "divide", "oslash", "ugrave",
    "uacute", "ucirc",  "uuml",   "yacute", "thorn",  "yuml",
};

struct NamedEntity {
  const char* name;
  uint32_t code_point;
  bool legacy;  // also valid without ';'
};

constexpr NamedEntity kOtherNames[] = {
    {"amp", '&', true},        {"AMP", '&', true},        {"lt", '<', true},
    {"LT", '<', true},         {"gt", '>', true},         {"GT", '>', true},
    {"quot", '"', true},       {"QUOT", '"', true},       {"COPY", 0xA9, true},
    {"REG", 0xAE, true},       {"apos", '\'', false},     {"ndash", 0x2013, false},
    {"mdash", 0x2014, false},  {"lsquo", 0x2018, false},  {"rsquo", 0x2019, false},
    {"sbquo", 0x201A, false},  {"ldquo", 0x201C, false},  {"rdquo", 0x201D, false},
    {"bdquo", 0x201E, false},  {"hellip", 0x2026, false}, {"bull", 0x2022, false},
    {"trade", 0x2122, false},  {"euro", 0x20AC, false},   {"dagger", 0x2020, false},
    {"prime", 0x2032, false},  {"larr", 0x2190, false},   {"rarr", 0x2192, false},
    {"hearts", 0x2665, false},
};

// Looks `name` up; `with_semicolon` says whether the reference ended in ';'.
bool LookupEntity(const std::string& name, bool with_semicolon, uint32_t* code_point) {
  for (int i = 0; i < 96; ++i) {
    if (name == kLatin1Names[i]) {
      *code_point = 0xA0 + i;
      return true;
    }
  }
  for (const NamedEntity& e : kOtherNames) {
    if (name == e.name && (with_semicolon || e.legacy)) {
      *code_point = e.code_point;
      return true;
    }
  }
  return false;
}

// Python's html._invalid_charrefs: C1 controls read as Windows-1252, and a few others.
uint32_t InvalidCharref(uint32_t n, bool* found) {
  static constexpr uint32_t kCp1252[32] = {
      0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  *found = true;
  if (n == 0x00) return 0xFFFD;
  if (n == 0x0D) return 0x0D;
  if (n >= 0x80 && n <= 0x9F) return kCp1252[n - 0x80];
  *found = false;
  return 0;
}

// Python's html._invalid_codepoints: references to these produce nothing.
bool IsInvalidCodePoint(uint32_t n) {
  if ((n >= 0x1 && n <= 0x8) || (n >= 0xE && n <= 0x1F) || (n >= 0x7F && n <= 0x9F) ||
      (n >= 0xFDD0 && n <= 0xFDEF) || n == 0xB) {
    return true;
  }
  return (n & 0xFFFE) == 0xFFFE && n <= 0x10FFFF;
}

bool IsDigit(char c, bool hex) {
  return (c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
}

// Replaces the reference starting at text[pos] == '&'; returns the index after what it consumed,
// or pos + 1 with '&' appended when there is no reference there (Python's regex did not match).
size_t UnescapeAt(const std::string& text, size_t pos, std::string* out) {
  size_t i = pos + 1;
  if (i < text.size() && text[i] == '#') {
    bool hex = i + 1 < text.size() && (text[i + 1] == 'x' || text[i + 1] == 'X');
    size_t start = i + (hex ? 2 : 1);
    size_t end = start;
    while (end < text.size() && IsDigit(text[end], hex)) ++end;
    if (end == start) {
      out->push_back('&');
      return pos + 1;
    }
    std::string digits = text.substr(start, end - start);
    size_t next = end < text.size() && text[end] == ';' ? end + 1 : end;
    // Python parses arbitrarily long numbers; anything past 0x10FFFF is U+FFFD anyway.
    uint64_t n = 0;
    for (char c : digits) {
      int d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
      n = n * (hex ? 16 : 10) + d;
      if (n > 0x10FFFF) n = 0x110000;
    }
    bool found = false;
    uint32_t replacement = n <= 0xFF ? InvalidCharref(static_cast<uint32_t>(n), &found) : 0;
    if (found) {
      AppendUtf8(replacement, out);
    } else if ((n >= 0xD800 && n <= 0xDFFF) || n > 0x10FFFF) {
      AppendUtf8(0xFFFD, out);
    } else if (!IsInvalidCodePoint(static_cast<uint32_t>(n))) {
      AppendUtf8(static_cast<uint32_t>(n), out);
    }
    return next;
  }
  // Named: [^\t\n\f <&#;]{1,32};?
  size_t end = i;
  while (end < text.size() && end - i < 32 && std::strchr("\t\n\f <&#;", text[end]) == nullptr) {
    ++end;
  }
  if (end == i) {
    out->push_back('&');
    return pos + 1;
  }
  std::string name = text.substr(i, end - i);
  bool semicolon = end < text.size() && text[end] == ';';
  uint32_t cp = 0;
  if (semicolon && LookupEntity(name, true, &cp)) {
    AppendUtf8(cp, out);
    return end + 1;
  }
  // Longest prefix that is a legacy (no ';') name; the rest is kept as written.
  for (size_t len = name.size(); len > 1; --len) {
    if (LookupEntity(name.substr(0, len), false, &cp)) {
      AppendUtf8(cp, out);
      return i + len;
    }
  }
  out->push_back('&');
  return pos + 1;
}

// Windows-1252's characters for the bytes 0x80..0x9F. "Sloppy" like ftfy's codec: the five
// bytes Windows-1252 leaves undefined read as the C1 controls of the same number.
constexpr char32_t kCp1252High[32] = {
    0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
    0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
    0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};

// The byte sloppy Windows-1252 (or Latin-1, for the C1 controls) reads as `c`; -1 for ASCII and
// for characters no single byte decodes to.
int MojibakeByte(char32_t c) {
  if (c < 0x80) return -1;
  if (c <= 0xFF) return static_cast<int>(c);  // Latin-1, and the C1 controls as themselves
  for (int i = 0; i < 32; ++i) {
    if (kCp1252High[i] == c) return 0x80 + i;
  }
  return -1;
}

// One UTF-8 sequence read back from its mojibake at text[i]: the characters whose Windows-1252
// bytes form a valid multi-byte sequence (no overlong forms, no surrogates). Returns the code
// point and sets *length, or 0.
char32_t DecodeMojibakeAt(const std::u32string& text, size_t i, size_t* length) {
  const int lead = MojibakeByte(text[i]);
  int need = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
  } else {
    return 0;
  }
  if (i + need >= text.size()) return 0;
  char32_t cp = static_cast<char32_t>(lead & (0x3F >> need));
  for (int k = 1; k <= need; ++k) {
    const int b = MojibakeByte(text[i + k]);
    if (b < 0x80 || b > 0xBF) return 0;
    if (k == 1) {
      // The second byte's range for the leads that would otherwise allow overlong forms,
      // surrogates or code points past U+10FFFF.
      if ((lead == 0xE0 && b < 0xA0) || (lead == 0xED && b > 0x9F) || (lead == 0xF0 && b < 0x90) ||
          (lead == 0xF4 && b > 0x8F)) {
        return 0;
      }
    }
    cp = (cp << 6) | static_cast<char32_t>(b & 0x3F);
  }
  *length = need + 1;
  return cp;
}

// ftfy's fix_encoding for the common case: UTF-8 that was decoded as Windows-1252 or Latin-1
// ("cafÃ©", "â€œ"), once or several times over. Each run of characters whose bytes form a valid
// UTF-8 sequence is replaced by what it encodes; rounds repeat while something changes.
std::u32string FixMojibake(std::u32string text) {
  for (int round = 0; round < 4; ++round) {
    std::u32string out;
    out.reserve(text.size());
    bool changed = false;
    for (size_t i = 0; i < text.size();) {
      size_t length = 0;
      const char32_t cp = DecodeMojibakeAt(text, i, &length);
      if (cp != 0) {
        out.push_back(cp);
        i += length;
        changed = true;
      } else {
        out.push_back(text[i++]);
      }
    }
    text = std::move(out);
    if (!changed) break;
  }
  return text;
}

// ftfy's control-character rules: C1 controls that are left read as Windows-1252
// (fix_c1_controls); the controls and invisible formatting characters ftfy removes
// (remove_control_chars; tab, line feed and carriage return stay for the whitespace rule).
bool IsRemovedControl(char32_t c) {
  return (c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
         (c >= 0x206A && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFC) ||
         (c >= 0x1D173 && c <= 0x1D17A) || (c >= 0xE0000 && c <= 0xE007F);
}

// The latin ligatures ftfy splits (fix_latin_ligatures), or nullptr.
const char32_t* LigatureLetters(char32_t c) {
  switch (c) {
    case 0x0132:
      return U"IJ";
    case 0x0133:
      return U"ij";
    case 0x0149:
      return U"\u02BCn";
    case 0x01C7:
      return U"LJ";
    case 0x01C8:
      return U"Lj";
    case 0x01C9:
      return U"lj";
    case 0x01CA:
      return U"NJ";
    case 0x01CB:
      return U"Nj";
    case 0x01CC:
      return U"nj";
    case 0xFB00:
      return U"ff";
    case 0xFB01:
      return U"fi";
    case 0xFB02:
      return U"fl";
    case 0xFB03:
      return U"ffi";
    case 0xFB04:
      return U"ffl";
    case 0xFB05:
      return U"\u017Ft";
    case 0xFB06:
      return U"st";
    default:
      return nullptr;
  }
}

std::u32string ToUtf32(const icu::UnicodeString& u) {
  std::u32string out;
  out.reserve(u.length());
  for (int32_t k = 0; k < u.length();) {
    const UChar32 c = u.char32At(k);
    out.push_back(static_cast<char32_t>(c));
    k += U16_LENGTH(c);
  }
  return out;
}

// A full- or half-width character's NFKC form ("Ａ" → "A", "ｶ" → "カ").
icu::UnicodeString Nfkc(char32_t c) {
  icu::UnicodeString u(static_cast<UChar32>(c));
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(error);
  if (U_FAILURE(error)) return u;
  icu::UnicodeString normalized = nfkc->normalize(u, error);
  return U_SUCCESS(error) ? normalized : u;
}

// Terminal escape sequences, ESC [ digits-and-semicolons letter (remove_terminal_escapes).
std::u32string RemoveTerminalEscapes(const std::u32string& text) {
  std::u32string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == 0x1B && i + 1 < text.size() && text[i + 1] == '[') {
      size_t j = i + 2;
      while (j < text.size() && ((text[j] >= '0' && text[j] <= '9') || text[j] == ';')) ++j;
      if (j < text.size() &&
          ((text[j] >= 'a' && text[j] <= 'z') || (text[j] >= 'A' && text[j] <= 'Z'))) {
        i = j;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// Python's re.sub(r'\s+', ' ', text).strip() with Unicode \s.
std::string CollapseWhitespace(const std::string& text) {
  // Compiled once; a compiled pattern is read-only and shared by all threads (PCRE2 docs).
  static const pcre2_code* const code = [] {
    int error = 0;
    PCRE2_SIZE offset = 0;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>("\\s+"), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  }();
  if (code == nullptr) return text;  // cannot happen: a constant, valid pattern
  std::string out(text.size() + 1, '\0');
  PCRE2_SIZE out_len = out.size();
  int rc =
      pcre2_substitute(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
                       PCRE2_SUBSTITUTE_GLOBAL, nullptr, nullptr, reinterpret_cast<PCRE2_SPTR>(" "),
                       1, reinterpret_cast<PCRE2_UCHAR*>(out.data()), &out_len);
  if (rc < 0) return text;  // cannot happen: valid UTF-8 in, output no longer than input
  out.resize(out_len);
  size_t first = out.find_first_not_of(' ');
  if (first == std::string::npos) return "";
  size_t last = out.find_last_not_of(' ');
  return out.substr(first, last - first + 1);
}

}  // namespace

std::string HtmlUnescape(const std::string& text) {
  if (text.find('&') == std::string::npos) return text;
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == '&') {
      pos = UnescapeAt(text, pos, &out);
    } else {
      out.push_back(text[pos++]);
    }
  }
  return out;
}

std::string FixText(const std::string& text) {
  // ftfy unescapes HTML itself only when the text holds no '<' (it is then not HTML).
  const std::string unescaped = text.find('<') == std::string::npos ? HtmlUnescape(text) : text;
  std::u32string t = ToUtf32(icu::UnicodeString::fromUTF8(unescaped));
  t = RemoveTerminalEscapes(t);
  t = FixMojibake(std::move(t));
  std::u32string fixed;
  fixed.reserve(t.size());
  for (char32_t c : t) {
    if (c >= 0x80 && c <= 0x9F) c = kCp1252High[c - 0x80];  // fix_c1_controls
    if (const char32_t* letters = LigatureLetters(c)) {
      fixed += letters;
      continue;
    }
    if ((c >= 0xFF01 && c <= 0xFFEF) || c == 0x3000) {  // fix_character_width: NFKC
      fixed += ToUtf32(Nfkc(c));
      continue;
    }
    if (c == 0x2018 || c == 0x2019 || c == 0x201A || c == 0x201B) c = '\'';  // uncurl_quotes
    if (c == 0x201C || c == 0x201D || c == 0x201E || c == 0x201F) c = '"';
    if (IsRemovedControl(c)) continue;
    fixed.push_back(c);
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF32(
      reinterpret_cast<const UChar32*>(fixed.data()), static_cast<int32_t>(fixed.size()));
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(error);
  if (U_SUCCESS(error)) {
    icu::UnicodeString normalized = nfc->normalize(u, error);
    if (U_SUCCESS(error)) u = normalized;
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string CleanClipText(const std::string& text) {
  // fromUTF8 replaces invalid sequences with U+FFFD, so everything after is valid UTF-8.
  std::string cleaned = FixText(text);
  cleaned = HtmlUnescape(HtmlUnescape(cleaned));
  cleaned = CollapseWhitespace(cleaned);
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(cleaned);
  u.toLower(icu::Locale::getRoot());
  std::string lowered;
  u.toUTF8String(lowered);
  return lowered;
}

}  // namespace adctl
