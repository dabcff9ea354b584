// The store's versioned schema (store_schema.cc): the migrations Store::Open applies in order.
// Internal to server/store/.
#pragma once

#include <vector>

namespace adctl::store_internal {

// Migration i takes a database from PRAGMA user_version i to i + 1; the newest version is their
// count. Append a migration, never edit one that shipped.
const std::vector<const char*>& Migrations();

}  // namespace adctl::store_internal
