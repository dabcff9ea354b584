// CLIP's caption cleaning, the step before its BPE (`basic_clean` + `whitespace_clean` + lower()
// in openai/CLIP `clip/simple_tokenizer.py`).
//
// CLIP runs ftfy.fix_text, then html.unescape twice, collapses whitespace runs to one space,
// strips, and lower-cases. ftfy is a Python library with no C++ counterpart; this file keeps the
// parts of ftfy's defaults that matter for clean UTF-8 captions — NFC normalisation and
// uncurling quotes (‘’‚‛ → ', “”„‟ → ") — and does not repair mojibake, latin ligatures,
// full-width characters, terminal escapes or control characters. Captions that need those repairs
// tokenise differently from CLIP's Python tokenizer.
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

// The whole CLIP cleaning: partial ftfy, unescape twice, whitespace collapse + strip, Unicode
// lower-case (ICU, full case mapping like Python's str.lower()). Invalid UTF-8 is replaced by
// U+FFFD as Python's decode(errors="replace") would.
std::string CleanClipText(const std::string& text);

}  // namespace adctl
