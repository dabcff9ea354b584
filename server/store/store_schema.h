// The store's schema (store_schema.cc): the migrations Store::Open applies in order, then the
// metric columns that follow from ForEachMetricValue. Internal to server/store/.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

namespace adctl::store_internal {

// Migration i takes a database from PRAGMA user_version i to i + 1; the newest version is their
// count. Append a migration, never edit one that shipped.
const std::vector<const char*>& Migrations();

// After the migrations: the statements adding to the metrics table a column for every value of
// ForEachMetricValue (common/metric_values.h) not among `columns` (the table's column names),
// "" when none is missing. A column is INTEGER or REAL by the member's type, NOT NULL, with the
// member's value in a default-constructed MetricValues as its default (what rows written before
// it existed read). So a new metric needs no migration, and a migration never adds a metric
// column.
std::string MissingMetricColumns(const std::set<std::string, std::less<>>& columns);

}  // namespace adctl::store_internal
