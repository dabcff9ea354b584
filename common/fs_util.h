// Small POSIX file-system helpers.
//
// RemoveTree replaces std::filesystem::remove_all in the product: on the GPU machine's
// toolchain (a GCC whose libstdc++ is split between a static part in the executable and the
// system's shared library) remove_all of a non-empty directory called a null function pointer
// and killed the process, e.g. when checkpoint retention deleted an old checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace adctl {

// Removes `path` and everything below it, like `rm -rf`: symlinks are removed, never followed.
// A missing path is not an error (0 entries). Returns the number of entries removed; on an
// error, what was removed before it stays removed and the error names the entry.
Result<int64_t> RemoveTree(const std::string& path);

// Creates `path` and its missing parents like `mkdir -p`, each folder it creates 0700 (a job's
// checkpoint or cache folder outside the data directory is its owner's alone, as the data
// directory is). Existing folders keep their mode. The error names the folder it could not make.
Status MakePrivateDirectories(const std::string& path);

// The whole of file `path` ("" when it cannot be read), and `text` written to `path`
// (replaced); the error names the file.
std::string ReadFileText(const std::string& path);
Status WriteFileText(const std::string& path, const std::string& text);
// `text` to `path` through `path`.tmp, fsync and rename: a reader sees the old file or the new
// one, never a part; the error names the file.
Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace adctl
