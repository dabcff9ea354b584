// The SQLite pieces the store's files share: `Stmt` (a prepared statement with positional binds
// whose rows are read by column name), `Txn` (BEGIN IMMEDIATE, rolled back unless committed)
// and `Query`/`QueryRow`, the one prepare/bind/step/collect loop. Internal to server/store/;
// not thread-safe (Store calls them under its mutex).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

namespace adctl::store_internal {

// A prepared statement with positional binds; finalised on destruction.
//
// The current row is read by the names the SELECT gives its columns (the column's own name or
// its AS alias), looked up through sqlite3_column_name in a map built on the first read. Asking
// for a name the result lacks (or has twice) is a programming error: the read gives 0, "" or
// NULL and column_status() becomes an Internal error naming the column, which Query and
// QueryRow return.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr);
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Status prepare_status() const {
    if (rc_ == SQLITE_OK) return Status::Ok();
    return Internal(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
  }

  Stmt& Bind(const std::string& v) {
    sqlite3_bind_text(stmt_, ++index_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(const char* v) { return Bind(std::string(v)); }
  Stmt& BindBlob(const std::string& v) {
    sqlite3_bind_blob(stmt_, ++index_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int64_t v) {
    sqlite3_bind_int64(stmt_, ++index_, v);
    return *this;
  }
  Stmt& Bind(int v) { return Bind(static_cast<int64_t>(v)); }
  Stmt& Bind(double v) {
    sqlite3_bind_double(stmt_, ++index_, v);
    return *this;
  }
  Stmt& BindNull() {
    sqlite3_bind_null(stmt_, ++index_);
    return *this;
  }

  // SQLITE_ROW → true, SQLITE_DONE → false; anything else is an error.
  Result<bool> Step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Internal(std::string("sqlite: ") + sqlite3_errmsg(db_));
  }
  Status Run() {
    auto r = Step();
    return r.ok() ? Status::Ok() : r.status();
  }
  // Ready to bind and run again (a batch of rows through one prepared statement).
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    index_ = 0;
  }

  // The current row's value in the column named `column`.
  int64_t Int(std::string_view column) const {
    const int i = ColumnIndex(column);
    return i < 0 ? 0 : sqlite3_column_int64(stmt_, i);
  }
  double Double(std::string_view column) const {
    const int i = ColumnIndex(column);
    return i < 0 ? 0 : sqlite3_column_double(stmt_, i);
  }
  bool IsNull(std::string_view column) const {
    const int i = ColumnIndex(column);
    return i < 0 || sqlite3_column_type(stmt_, i) == SQLITE_NULL;
  }
  // TEXT or BLOB, the bytes as stored ("" for NULL).
  std::string Text(std::string_view column) const {
    const int i = ColumnIndex(column);
    if (i < 0) return std::string();
    const void* p = sqlite3_column_blob(stmt_, i);
    int n = sqlite3_column_bytes(stmt_, i);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }
  // A value of a record's list (common/record_values.h) by its type.
  void Read(std::string_view column, int64_t* v) const { *v = Int(column); }
  void Read(std::string_view column, int32_t* v) const { *v = static_cast<int32_t>(Int(column)); }
  void Read(std::string_view column, double* v) const { *v = Double(column); }
  void Read(std::string_view column, std::string* v) const { *v = Text(column); }
  // No reads by position (and no literal 0 taken for a null name).
  int64_t Int(int) const = delete;
  double Double(int) const = delete;
  bool IsNull(int) const = delete;
  std::string Text(int) const = delete;
  // Internal naming the first column read that the result lacks; Ok otherwise.
  Status column_status() const {
    return column_error_.empty() ? Status::Ok() : Internal(column_error_);
  }

 private:
  static constexpr int kMissing = -1;
  static constexpr int kTwice = -2;

  int ColumnIndex(std::string_view name) const {
    if (!columns_read_) {
      for (int i = 0, n = sqlite3_column_count(stmt_); i < n; ++i) {
        const char* column = sqlite3_column_name(stmt_, i);
        if (column == nullptr) continue;  // out of memory: reads as missing
        auto [it, inserted] = columns_.emplace(column, i);
        if (!inserted) it->second = kTwice;
      }
      columns_read_ = true;
    }
    const auto it = columns_.find(name);
    const int index = it == columns_.end() ? kMissing : it->second;
    if (index < 0 && column_error_.empty()) {
      const char* sql = sqlite3_sql(stmt_);
      column_error_ = "sqlite: column '" + std::string(name) + "' " +
                      (index == kMissing ? "is not in" : "appears twice in") + " the result of \"" +
                      std::string(sql ? sql : "").substr(0, 80) + "\"";
    }
    return index;
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
  int index_ = 0;
  // The result's column names and their indexes (kTwice: ambiguous), on the first read.
  mutable std::map<std::string, int, std::less<>> columns_;
  mutable bool columns_read_ = false;
  mutable std::string column_error_;
};

// Rolls back unless committed.
class Txn {
 public:
  explicit Txn(sqlite3* db) : db_(db) {
    ok_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~Txn() {
    if (ok_ && !committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  Status begin_status() const {
    return ok_ ? Status::Ok() : Internal(std::string("sqlite begin: ") + sqlite3_errmsg(db_));
  }
  Status Commit() {
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      return Internal(std::string("sqlite commit: ") + sqlite3_errmsg(db_));
    }
    committed_ = true;
    return Status::Ok();
  }

 private:
  sqlite3* db_;
  bool ok_ = false;
  bool committed_ = false;
};

// Prepares `sql`, binds `args` in order (Stmt::Bind's types) and runs it once: a write. A failed
// prepare or step is an Internal error with SQLite's message.
template <typename... Args>
Status Execute(sqlite3* db, const std::string& sql, const Args&... args) {
  Stmt s(db, sql);
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  (s.Bind(args), ...);
  return s.Run();
}

// The row type a reader makes: read(const Stmt&) → Row.
template <typename Read>
using RowOf = std::decay_t<std::invoke_result_t<Read&, const Stmt&>>;

// The `bind` of a query without parameters.
inline void NoBinds(Stmt&) {}

// Prepares `sql`, calls bind(stmt) to bind its parameters, and returns read(stmt) of every row
// in order. A failed prepare or step, or a column `read` names that the result lacks, is an
// Internal error.
template <typename Bind, typename Read>
Result<std::vector<RowOf<Read>>> Query(sqlite3* db, const std::string& sql, Bind&& bind,
                                       Read&& read) {
  Stmt s(db, sql);
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  bind(s);
  std::vector<RowOf<Read>> rows;
  while (true) {
    auto row = s.Step();
    if (!row.ok()) return row.status();
    if (!row.value()) break;
    rows.push_back(read(static_cast<const Stmt&>(s)));
    ADCTL_RETURN_IF_ERROR(s.column_status());
  }
  return rows;
}

// Query's first row only (the statement is not stepped further); nullopt when there is none.
template <typename Bind, typename Read>
Result<std::optional<RowOf<Read>>> QueryRow(sqlite3* db, const std::string& sql, Bind&& bind,
                                            Read&& read) {
  Stmt s(db, sql);
  ADCTL_RETURN_IF_ERROR(s.prepare_status());
  bind(s);
  auto row = s.Step();
  if (!row.ok()) return row.status();
  if (!row.value()) return std::optional<RowOf<Read>>();
  std::optional<RowOf<Read>> out(read(static_cast<const Stmt&>(s)));
  ADCTL_RETURN_IF_ERROR(s.column_status());
  return out;
}

}  // namespace adctl::store_internal
