// The store's statement helpers (server/store/statement.h) on an in-memory database: rows read
// by column name, Query and QueryRow, and the errors that name a missing or doubled column.
#include "server/store/statement.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

namespace adctl {
namespace {

// Rows are read by the names the SELECT gives its columns, wherever they stand; a name the result
// lacks (or has twice) is an error that names it, not a read of some other column.
TEST(StatementTest, ReadsRowsByColumnNameAndNamesAnUnknownColumn) {
  using store_internal::NoBinds;
  using store_internal::Query;
  using store_internal::QueryRow;
  using store_internal::Stmt;
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE t (a INTEGER, b TEXT, c REAL); "
                         "INSERT INTO t VALUES (1, 'one', 1.5), (2, NULL, 2.5);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  struct Row {
    int64_t a;
    std::string b;
    bool b_null;
    double c;
  };
  const auto read = [](const Stmt& s) {
    return Row{s.Int("a"), s.Text("b"), s.IsNull("b"), s.Double("c")};
  };
  auto rows = Query(
      db, "SELECT c, b, a FROM t WHERE a >= ? ORDER BY a", [](Stmt& s) { s.Bind(1); }, read);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].a, 1);
  EXPECT_EQ((*rows)[0].b, "one");
  EXPECT_FALSE((*rows)[0].b_null);
  EXPECT_EQ((*rows)[0].c, 1.5);
  EXPECT_TRUE((*rows)[1].b_null);
  auto aliased = QueryRow(db, "SELECT COUNT(*) AS n FROM t", NoBinds,
                          [](const Stmt& s) { return s.Int("n"); });
  ASSERT_TRUE(aliased.ok());
  EXPECT_EQ(aliased->value_or(0), 2);
  auto none = QueryRow(db, "SELECT a FROM t WHERE a > 5", NoBinds,
                       [](const Stmt& s) { return s.Int("a"); });
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  auto unknown = Query(db, "SELECT a, b FROM t", NoBinds, read);  // no column c
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInternal);
  EXPECT_NE(unknown.status().message().find("column 'c' is not in the result of \"SELECT a, b"),
            std::string::npos)
      << unknown.status().message();
  auto twice = QueryRow(db, "SELECT a, b, c, a + 1 AS a FROM t", NoBinds, read);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("column 'a' appears twice"), std::string::npos)
      << twice.status().message();
  auto bad_sql = Query(db, "SELECT nope FROM t", NoBinds, read);
  EXPECT_EQ(bad_sql.status().code(), StatusCode::kInternal);
  sqlite3_close(db);
}

}  // namespace
}  // namespace adctl
