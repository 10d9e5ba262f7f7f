#include "history/sqlite-util.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "core/fail-point.h"

namespace spillway {
namespace {

// The fail point runs-db.write (core/fail-point.h): a VFS over the default one that passes every
// call through and checks the point before each write to a write-ahead log, so that a test can
// kill the worker in the middle of a commit (some of its frames written, not its commit frame).
// Registered as the default VFS only when SPILLWAY_FAIL_POINTS arms a runs-db point.
struct FaultFile {
  sqlite3_file base;   // first: SQLite sees this
  sqlite3_file* real;  // the default VFS's file, in the bytes after this struct
  bool wal;
};

sqlite3_file* real_of(sqlite3_file* f) {
  return reinterpret_cast<FaultFile*>(f)->real;
}

int fault_close(sqlite3_file* f) {
  return real_of(f)->pMethods->xClose(real_of(f));
}
int fault_read(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  return real_of(f)->pMethods->xRead(real_of(f), buf, n, off);
}
int fault_write(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  if (reinterpret_cast<FaultFile*>(f)->wal && fail_point("runs-db.write"))
    return SQLITE_IOERR_WRITE;
  return real_of(f)->pMethods->xWrite(real_of(f), buf, n, off);
}
int fault_truncate(sqlite3_file* f, sqlite3_int64 size) {
  return real_of(f)->pMethods->xTruncate(real_of(f), size);
}
int fault_sync(sqlite3_file* f, int flags) {
  return real_of(f)->pMethods->xSync(real_of(f), flags);
}
int fault_file_size(sqlite3_file* f, sqlite3_int64* size) {
  return real_of(f)->pMethods->xFileSize(real_of(f), size);
}
int fault_lock(sqlite3_file* f, int level) {
  return real_of(f)->pMethods->xLock(real_of(f), level);
}
int fault_unlock(sqlite3_file* f, int level) {
  return real_of(f)->pMethods->xUnlock(real_of(f), level);
}
int fault_check_reserved(sqlite3_file* f, int* out) {
  return real_of(f)->pMethods->xCheckReservedLock(real_of(f), out);
}
int fault_file_control(sqlite3_file* f, int op, void* arg) {
  return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}
int fault_sector_size(sqlite3_file* f) {
  return real_of(f)->pMethods->xSectorSize(real_of(f));
}
int fault_device(sqlite3_file* f) {
  return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}
int fault_shm_map(sqlite3_file* f, int region, int size, int extend, void volatile** out) {
  return real_of(f)->pMethods->xShmMap(real_of(f), region, size, extend, out);
}
int fault_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  return real_of(f)->pMethods->xShmLock(real_of(f), offset, n, flags);
}
void fault_shm_barrier(sqlite3_file* f) {
  real_of(f)->pMethods->xShmBarrier(real_of(f));
}
int fault_shm_unmap(sqlite3_file* f, int del) {
  return real_of(f)->pMethods->xShmUnmap(real_of(f), del);
}
int fault_fetch(sqlite3_file* f, sqlite3_int64 off, int n, void** out) {
  return real_of(f)->pMethods->xFetch(real_of(f), off, n, out);
}
int fault_unfetch(sqlite3_file* f, sqlite3_int64 off, void* p) {
  return real_of(f)->pMethods->xUnfetch(real_of(f), off, p);
}

const sqlite3_io_methods kFaultMethods = {3,
                                          fault_close,
                                          fault_read,
                                          fault_write,
                                          fault_truncate,
                                          fault_sync,
                                          fault_file_size,
                                          fault_lock,
                                          fault_unlock,
                                          fault_check_reserved,
                                          fault_file_control,
                                          fault_sector_size,
                                          fault_device,
                                          fault_shm_map,
                                          fault_shm_lock,
                                          fault_shm_barrier,
                                          fault_shm_unmap,
                                          fault_fetch,
                                          fault_unfetch};

int fault_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* file, int flags, int* out_flags) {
  auto* root = static_cast<sqlite3_vfs*>(vfs->pAppData);
  auto* f = reinterpret_cast<FaultFile*>(file);
  f->real = reinterpret_cast<sqlite3_file*>(f + 1);
  f->real->pMethods = nullptr;
  f->wal = (flags & SQLITE_OPEN_WAL) != 0;
  const int rc = root->xOpen(root, name, f->real, flags, out_flags);
  // A real file that has methods is closed through ours, even when its open failed.
  f->base.pMethods =
      f->real->pMethods && f->real->pMethods->iVersion >= 3 ? &kFaultMethods : nullptr;
  if (f->real->pMethods && !f->base.pMethods) {
    f->real->pMethods->xClose(f->real);
    return SQLITE_CANTOPEN;
  }
  return rc;
}

void register_fault_vfs() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!fail_points_armed("runs-db.")) return;
    static sqlite3_vfs vfs;
    sqlite3_vfs* root = sqlite3_vfs_find(nullptr);
    if (!root) return;
    vfs = *root;
    vfs.zName = "spillway-fail-points";
    vfs.szOsFile = static_cast<int>(sizeof(FaultFile)) + root->szOsFile;
    vfs.pAppData = root;
    vfs.xOpen = fault_open;
    vfs.pNext = nullptr;
    sqlite3_vfs_register(&vfs, 1);
  });
}

}  // namespace

std::string damaged_database(const std::string& path, const std::string& why) {
  return path + " is damaged (" + why +
         "); Spillway leaves it as it is: move it aside (History then starts a new one) or restore "
         "it from a backup";
}

namespace {

// A condition of the database file rather than of the query (locked by another process,
// read-only, a full disk, damaged, not openable), as a sentence that names the file and what to
// do, without the SQL; "" for any other result code.
std::string file_problem(int rc, sqlite3* db) {
  const char* file = db ? sqlite3_db_filename(db, "main") : nullptr;
  if (!file || !*file) return {};
  const std::string path = file, why = sqlite3_errmsg(db);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return path + " is locked by another process (" + why +
             "): close the program holding it (another Spillway worker or app, a database browser, "
             "a "
             "backup) and try again";
    case SQLITE_READONLY:
      return path + " is read-only (" + why +
             "): make it, its folder and the -wal and -shm files beside it writable";
    case SQLITE_FULL:
      return "the disk holding " + path + " is full (" + why + "): free space on it";
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return damaged_database(path, why);
    case SQLITE_CANTOPEN: {
      const std::string folder = std::filesystem::path(path).parent_path().string();
      if (::access(folder.c_str(), W_OK) != 0)
        return "cannot open " + path + " (" + why + "): its folder " + folder +
               " is not writable (" + std::strerror(errno) +
               "), and SQLite keeps its -wal and -shm files there: make it writable";
      return "cannot open " + path + " (" + why +
             "): make sure it and its folder exist and are writable";
    }
    default:
      return {};
  }
}

}  // namespace

Status sqlite_status(int rc, const std::string& what, sqlite3* db) {
  std::string msg = file_problem(rc, db);
  if (msg.empty()) msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
      return Status();
    case SQLITE_FULL:
      return no_space(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return corrupt(msg);
    case SQLITE_CONSTRAINT:
      return invalid_argument(msg);
    case SQLITE_NOMEM:
      return out_of_memory(msg);
    case SQLITE_MISUSE:
    case SQLITE_RANGE:
      return internal_error(msg);
    default:
      return io_error(msg);
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
  return rc == SQLITE_OK ? Status()
                         : sqlite_status(rc, "bind parameter " + std::to_string(index), db);
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
      sqlite3_bind_text64(stmt_, index, v.data(), v.size(), SQLITE_TRANSIENT, SQLITE_UTF8), index,
      db_);
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

bool SqliteStmt::is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}
std::int64_t SqliteStmt::column_int64(int col) const {
  return sqlite3_column_int64(stmt_, col);
}
double SqliteStmt::column_double(int col) const {
  return sqlite3_column_double(stmt_, col);
}

std::string SqliteStmt::column_text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  if (!p) return {};
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
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
  register_fault_vfs();
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
    if (!file_problem(rc, db_).empty()) return sqlite_status(rc, "sql", db_);
    Status s = sqlite_status(rc, "sql", nullptr);
    return Status(s.code(), "sql '" + sql.substr(0, 120) + "': " + msg);
  }
  return Status();
}

Result<SqliteStmt> SqliteDb::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK)
    return sqlite_status(rc, "prepare '" + std::string(sql.substr(0, 120)) + "'", db_);
  return SqliteStmt(stmt, db_);
}

Result<std::int64_t> SqliteDb::query_int(std::string_view sql) {
  SPW_ASSIGN_OR_RETURN(SqliteStmt stmt, prepare(sql));
  SPW_ASSIGN_OR_RETURN(bool row, stmt.step());
  if (!row) return not_found("no row from '" + std::string(sql) + "'");
  return stmt.column_int64(0);
}

int SqliteDb::changes() const {
  return sqlite3_changes(db_);
}

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
