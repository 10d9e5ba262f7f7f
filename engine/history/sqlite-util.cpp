#include "history/sqlite-util.h"

#include <utility>

namespace spillway {

Status sqlite_status(int rc, const std::string& what, sqlite3* db) {
  std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE: return Status();
    case SQLITE_FULL: return no_space(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return corrupt(msg);
    case SQLITE_CONSTRAINT: return invalid_argument(msg);
    case SQLITE_NOMEM: return out_of_memory(msg);
    case SQLITE_MISUSE:
    case SQLITE_RANGE: return internal_error(msg);
    default: return io_error(msg);
  }
}

// ---- SqliteStmt ----

SqliteStmt::~SqliteStmt() {
  if (stmt_) sqlite3_finalize(stmt_);
}

SqliteStmt::SqliteStmt(SqliteStmt&& o) noexcept
    : bind_error_(std::move(o.bind_error_)), stmt_(std::exchange(o.stmt_, nullptr)), db_(o.db_) {}

SqliteStmt& SqliteStmt::operator=(SqliteStmt&& o) noexcept {
  if (this != &o) {
    if (stmt_) sqlite3_finalize(stmt_);
    stmt_ = std::exchange(o.stmt_, nullptr);
    db_ = o.db_;
    bind_error_ = std::move(o.bind_error_);
  }
  return *this;
}

namespace {
Status check_bind(int rc, int index, sqlite3* db) {
  return rc == SQLITE_OK ? Status() : sqlite_status(rc, "bind parameter " + std::to_string(index), db);
}
}  // namespace

SqliteStmt& SqliteStmt::bind(int index, std::int64_t v) {
  Status s = check_bind(sqlite3_bind_int64(stmt_, index, v), index, db_);
  if (!s.ok() && bind_error_.ok()) bind_error_ = s;
  return *this;
}

SqliteStmt& SqliteStmt::bind(int index, double v) {
  Status s = check_bind(sqlite3_bind_double(stmt_, index, v), index, db_);
  if (!s.ok() && bind_error_.ok()) bind_error_ = s;
  return *this;
}

SqliteStmt& SqliteStmt::bind(int index, std::string_view v) {
  Status s = check_bind(
      sqlite3_bind_text64(stmt_, index, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8), index, db_);
  if (!s.ok() && bind_error_.ok()) bind_error_ = s;
  return *this;
}

SqliteStmt& SqliteStmt::bind_null(int index) {
  Status s = check_bind(sqlite3_bind_null(stmt_, index), index, db_);
  if (!s.ok() && bind_error_.ok()) bind_error_ = s;
  return *this;
}

Result<bool> SqliteStmt::step() {
  if (!bind_error_.ok()) return bind_error_;
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return sqlite_status(rc, std::string("sql '") + sqlite3_sql(stmt_) + "'", db_);
}

Status SqliteStmt::run() {
  for (;;) {
    SPW_ASSIGN_OR_RETURN(bool row, step());
    if (!row) return Status();
  }
}

void SqliteStmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = Status();
}

bool SqliteStmt::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
std::int64_t SqliteStmt::column_int64(int col) const { return sqlite3_column_int64(stmt_, col); }
double SqliteStmt::column_double(int col) const { return sqlite3_column_double(stmt_, col); }

std::string SqliteStmt::column_text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
}

std::optional<std::int64_t> SqliteStmt::column_opt_int64(int col) const {
  if (is_null(col)) return std::nullopt;
  return column_int64(col);
}

std::optional<double> SqliteStmt::column_opt_double(int col) const {
  if (is_null(col)) return std::nullopt;
  return column_double(col);
}

// ---- SqliteDb ----

SqliteDb::~SqliteDb() {
  if (db_) sqlite3_close_v2(db_);
}

SqliteDb::SqliteDb(SqliteDb&& o) noexcept : db_(std::exchange(o.db_, nullptr)) {}

SqliteDb& SqliteDb::operator=(SqliteDb&& o) noexcept {
  if (this != &o) {
    if (db_) sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}

Result<SqliteDb> SqliteDb::open(const std::string& path) {
  SqliteDb db;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db.db_, flags, nullptr);
  if (rc != SQLITE_OK) return sqlite_status(rc, "open database " + path, db.db_);
  sqlite3_extended_result_codes(db.db_, 1);
  return db;
}

Status SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    Status s = sqlite_status(rc, "sql", nullptr);
    return Status(s.code(), "sql '" + sql.substr(0, 120) + "': " + msg);
  }
  return Status();
}

Result<SqliteStmt> SqliteDb::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return sqlite_status(rc, "prepare '" + std::string(sql.substr(0, 120)) + "'", db_);
  return SqliteStmt(stmt, db_);
}

Result<std::int64_t> SqliteDb::query_int(std::string_view sql) {
  SPW_ASSIGN_OR_RETURN(SqliteStmt stmt, prepare(sql));
  SPW_ASSIGN_OR_RETURN(bool row, stmt.step());
  if (!row) return not_found("no row from '" + std::string(sql) + "'");
  return stmt.column_int64(0);
}

int SqliteDb::changes() const { return sqlite3_changes(db_); }

// ---- SqliteTransaction ----

Result<SqliteTransaction> SqliteTransaction::begin(SqliteDb& db) {
  SPW_RETURN_IF_ERROR(db.exec("BEGIN IMMEDIATE"));
  return SqliteTransaction(&db);
}

SqliteTransaction::~SqliteTransaction() {
  if (db_) (void)db_->exec("ROLLBACK");
}

Status SqliteTransaction::commit() {
  if (!db_) return internal_error("commit of a finished transaction");
  Status s = db_->exec("COMMIT");
  if (s.ok()) db_ = nullptr;  // on failure the destructor rolls back
  return s;
}

}  // namespace spillway
