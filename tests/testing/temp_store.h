// adctld's Store on a test's temporary directory: <dir>/adctl.db, created and migrated.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/clock.h"
#include "server/store/store.h"
#include "tests/testing/temp_dir.h"

namespace adctl {

// The store, whose times come from `clock` (which must outlive it). When it cannot be opened
// this throws, with the path and the status: GoogleTest fails the test (or its SetUp) there, and
// nothing runs on a missing store.
inline std::unique_ptr<Store> OpenTestStore(const TempDir& dir,
                                            const Clock* clock = SystemClock()) {
  const std::string path = dir.file("adctl.db");
  auto store = Store::Open(path, clock);
  if (!store.ok()) {
    throw std::runtime_error("Store::Open " + path + ": " + store.status().ToString());
  }
  return std::move(store).value();
}

}  // namespace adctl
