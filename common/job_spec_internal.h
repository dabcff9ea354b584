// What job_spec.cc (parsing, emission) and job_spec_validate.cc (ValidateJobSpec) share. Not
// for use outside those two files.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace adctl::job_spec_internal {

// Shortest decimal form that reads back to the same double ("0.0001", "1e-08", "60").
std::string FormatDouble(double v);
// The byte offset of the first ill-formed UTF-8 sequence (overlongs, surrogates and code points
// past U+10FFFF included); nullopt when `text` is well-formed.
std::optional<size_t> FirstInvalidUtf8(const std::string& text);

}  // namespace adctl::job_spec_internal
