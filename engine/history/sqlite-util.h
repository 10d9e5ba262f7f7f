// Small RAII owners for SQLite handles (sqlite3*, sqlite3_stmt*) and a scoped transaction, turning
// SQLite result codes into Status values.
//
// SqliteDb owns one connection and closes it on destruction; SqliteStmt owns one prepared statement
// and finalizes it; SqliteTransaction rolls back unless commit() was called. All are move-only
// (deleted copy). A statement must be destroyed before the connection that prepared it.
// Thread-safety: none of these types is thread-safe; the connection is opened in SQLite's
// multi-thread mode (SQLITE_OPEN_NOMUTEX), so the owner (RunStore) serializes calls itself.
//
// Error mapping: SQLITE_FULL -> kNoSpace, SQLITE_CORRUPT/NOTADB -> kCorrupt, SQLITE_CONSTRAINT ->
// kInvalidArgument, SQLITE_NOMEM -> kOutOfMemory, everything else (BUSY after the busy timeout,
// CANTOPEN, IOERR, READONLY) -> kIo. Messages carry sqlite3_errmsg and the statement's purpose.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace spillway {

// "PATH is damaged (WHY); Spillway leaves it as it is: move it aside …": what a damaged run
// database says, whether SQLite or Spillway's own checks found the damage.
std::string damaged_database(const std::string& path, const std::string& why);

// Maps an SQLite result code (primary or extended) to a Status with `what` and the library's
// message.
Status sqlite_status(int rc, const std::string& what, sqlite3* db = nullptr);

class SqliteStmt {
 public:
  SqliteStmt() = default;
  SqliteStmt(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  ~SqliteStmt();
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;
  SqliteStmt(SqliteStmt&& o) noexcept;
  SqliteStmt& operator=(SqliteStmt&& o) noexcept;

  // Parameters are 1-based, as in sqlite3_bind_*. An empty optional binds NULL. Bind errors surface
  // from the next step() (SQLite reports them there too), so the binders return *this for chaining.
  SqliteStmt& bind(int index, std::int64_t v);
  SqliteStmt& bind(int index, int v) { return bind(index, static_cast<std::int64_t>(v)); }
  SqliteStmt& bind(int index, double v);
  SqliteStmt& bind(int index, std::string_view v);  // copied (SQLITE_TRANSIENT)
  SqliteStmt& bind(int index, const std::string& v) { return bind(index, std::string_view(v)); }
  SqliteStmt& bind(int index, const char* v) { return bind(index, std::string_view(v)); }
  SqliteStmt& bind_null(int index);
  template <typename T>
  SqliteStmt& bind(int index, const std::optional<T>& v) {
    return v ? bind(index, *v) : bind_null(index);
  }

  // Advances: true when a row is available, false when done.
  Result<bool> step();
  // Steps to completion, for statements that return no rows.
  Status run();
  void reset();

  bool is_null(int col) const;
  std::int64_t column_int64(int col) const;
  double column_double(int col) const;
  std::string column_text(int col) const;  // "" for NULL
  std::optional<std::int64_t> column_opt_int64(int col) const;
  std::optional<double> column_opt_double(int col) const;

  sqlite3_stmt* get() const { return stmt_; }

 private:
  Status bind_error_;
  sqlite3_stmt* stmt_ = nullptr;
  sqlite3* db_ = nullptr;
};

class SqliteDb {
 public:
  SqliteDb() = default;
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;
  SqliteDb(SqliteDb&& o) noexcept;
  SqliteDb& operator=(SqliteDb&& o) noexcept;

  // Opens (creating when missing) a database file read-write. kIo / kCorrupt on failure.
  static Result<SqliteDb> open(const std::string& path);

  // Runs one or more statements that return no rows (DDL, pragmas that return nothing).
  Status exec(const std::string& sql);
  Result<SqliteStmt> prepare(std::string_view sql);
  // The first column of the first row of `sql` as an integer (PRAGMA user_version and the like).
  Result<std::int64_t> query_int(std::string_view sql);
  // Rows changed by the last INSERT/UPDATE/DELETE on this connection.
  int changes() const;

  sqlite3* get() const { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

// BEGIN IMMEDIATE (takes the write lock up front, so two writers wait on busy_timeout instead of
// failing with SQLITE_BUSY at commit time) ... COMMIT, or ROLLBACK when destroyed uncommitted.
class SqliteTransaction {
 public:
  static Result<SqliteTransaction> begin(SqliteDb& db);
  ~SqliteTransaction();
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;
  SqliteTransaction(SqliteTransaction&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  SqliteTransaction& operator=(SqliteTransaction&&) = delete;

  Status commit();

 private:
  explicit SqliteTransaction(SqliteDb* db) : db_(db) {}
  SqliteDb* db_ = nullptr;
};

}  // namespace spillway
