// The run database's schema as a numbered list of migrations, applied through PRAGMA user_version.
//
// Migration i (1-based) takes a database at user_version i-1 to i. Migrations are append-only: a
// released migration is never edited, a schema change is a new entry at the end. Each runs in its
// own BEGIN IMMEDIATE transaction that re-reads user_version first, so two processes opening an old
// database at once (worker and GUI) migrate it exactly once. A database newer than this build
// (user_version > number of known migrations) is refused with kUnsupported instead of being
// touched.
//
// Thread-safety: as SqliteDb (the caller serializes). Ownership: the migration texts are static.
#pragma once

#include <span>

#include "history/sqlite-util.h"

namespace spillway {

struct Migration {
  const char* description;
  const char* sql;  // one or more statements
  // A data change SQL alone would say badly, run after `sql` in the same transaction; may be null.
  Status (*apply)(SqliteDb& db) = nullptr;
};

// The run store's migrations, in order.
std::span<const Migration> run_store_migrations();

// Brings `db` up to migrations.size(). Returns the user_version the database had before.
// kUnsupported when the database is newer than `migrations`, kCorrupt when its version is negative
// (a damaged file); the SQLite error of a failing migration
// otherwise (that migration is rolled back; earlier ones stay applied).
Result<int> apply_migrations(SqliteDb& db, std::span<const Migration> migrations);

}  // namespace spillway
