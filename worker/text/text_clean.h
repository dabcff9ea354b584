// CLIP's caption cleaning, the step before its BPE (`basic_clean` + `whitespace_clean` + lower()
// in openai/CLIP `clip/simple_tokenizer.py`).
//
// CLIP runs ftfy.fix_text, then html.unescape twice, collapses whitespace runs to one space,
// strips, and lower-cases. ftfy is a Python library with no C++ counterpart; FixText here does
// its default fixes in its order: HTML unescaping when the text holds no '<', terminal escapes
// removed, mojibake repaired (UTF-8 read as Windows-1252 or Latin-1, "cafÃ©" → "café", also
// when it happened twice), C1 controls read as Windows-1252, latin ligatures split, full- and
// half-width characters to their NFKC forms, curly quotes uncurled, the control characters ftfy
// drops removed, and NFC. Its mojibake repair works sequence by sequence (each run of
// characters whose Windows-1252 bytes are a valid UTF-8 sequence) where ftfy weighs a
// "badness" score first, and ftfy's rarer encodings (MacRoman, cp437, the "Â " lost-byte case)
// are not tried: such captions can tokenise differently from CLIP's Python tokenizer.
//
// html.unescape is Python's algorithm (numeric references with its replacement rules; named
// references with or without ';' for the legacy names), over a table of the commonly used named
// entities (the Latin-1 set, &amp; &lt; &gt; &quot; &apos;, dashes, curly quotes, ellipsis,
// trade, euro, bullet); other HTML5 names stay as written. Pure functions; thread-safe.
#pragma once

#include <string>

namespace adctl {

// Python's html.unescape on UTF-8 text (see the file comment for the named-entity table).
std::string HtmlUnescape(const std::string& text);

// ftfy.fix_text's default fixes (the file comment lists them and what is left out).
std::string FixText(const std::string& text);

// The whole CLIP cleaning: FixText, unescape twice, whitespace collapse + strip, Unicode
// lower-case (ICU, full case mapping like Python's str.lower()). Invalid UTF-8 is replaced by
// U+FFFD as Python's decode(errors="replace") would.
std::string CleanClipText(const std::string& text);

}  // namespace adctl
