// Error text for JSON read from a file, without the file's bytes.
//
// nlohmann's parse errors quote what they last read ("last read: 'root:$y$...'"), so a spec that
// points a model or data path at a file it may not read would get that file's bytes back in an
// event. Messages about files name the file, its size and what was expected; never its content.
#pragma once

#include <exception>
#include <nlohmann/json.hpp>
#include <string>

namespace adctl {

// "not valid JSON (syntax error at byte N)" for a parse error; for the other JSON errors (a
// field of the wrong type, a missing key), whose text names only the type or our key, that text.
inline std::string JsonErrorWithoutContent(const std::exception& e) {
  if (const auto* parse = dynamic_cast<const nlohmann::json::parse_error*>(&e)) {
    return "not valid JSON (syntax error at byte " + std::to_string(parse->byte) + ")";
  }
  if (dynamic_cast<const nlohmann::json::exception*>(&e) != nullptr) return e.what();
  return "not valid JSON";
}

}  // namespace adctl
