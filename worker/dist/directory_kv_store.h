// A KeyValueStore backed by a directory, for standalone multi-process runs (no adctld) and tests.
//
// Each key is one file: Set writes a temporary file and renames it into place, so a reader sees
// either nothing or the whole value; Get polls until the file appears. Works across processes on
// one host (or on a shared file system with atomic rename). The directory must be fresh for each
// job attempt (e.g. <job-dir>/rendezvous/attempt-<A>): keys left from an earlier attempt would be
// read as current. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "worker/dist/kv_store.h"

namespace adctl {

// Creates `dir` (and parents) on first Set if it does not exist.
std::unique_ptr<KeyValueStore> MakeDirectoryKeyValueStore(const std::string& dir);

}  // namespace adctl
