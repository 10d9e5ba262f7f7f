#include "history/schema.h"

#include <string>

namespace spillway {
namespace {

// Times are unix seconds (REAL, UTC); t_s columns are seconds since run start (the events.jsonl
// time base). Child rows cascade with their run (PRAGMA foreign_keys=ON is set per connection).
constexpr Migration kMigrations[] = {
    {"runs, metrics, samples, events, checkpoints, evals", R"sql(
CREATE TABLE runs (
  id              TEXT PRIMARY KEY,
  name            TEXT NOT NULL DEFAULT '',
  status          TEXT NOT NULL
                  CHECK (status IN ('running','completed','failed','interrupted','stopped')),
  created_at      REAL NOT NULL,
  started_at      REAL,
  ended_at        REAL,
  job_json        TEXT NOT NULL DEFAULT '{}',
  model_name      TEXT NOT NULL DEFAULT '',
  model_path      TEXT NOT NULL DEFAULT '',
  dataset         TEXT NOT NULL DEFAULT '',
  dataset_hash    TEXT NOT NULL DEFAULT '',
  hardware_json   TEXT NOT NULL DEFAULT '{}',
  software_json   TEXT NOT NULL DEFAULT '{}',
  run_dir         TEXT NOT NULL DEFAULT '',
  parent_id       TEXT,
  host            TEXT NOT NULL DEFAULT '',
  boot_id         TEXT NOT NULL DEFAULT '',
  pid             INTEGER,
  pid_start_ticks INTEGER,
  tags            TEXT NOT NULL DEFAULT '[]',
  notes           TEXT NOT NULL DEFAULT '',
  final_loss      REAL,
  final_step      INTEGER,
  tokens          INTEGER,
  error_message   TEXT NOT NULL DEFAULT ''
);
CREATE INDEX runs_by_created ON runs(created_at);
CREATE INDEX runs_by_status ON runs(status);

CREATE TABLE metrics (
  run_id       TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step         INTEGER NOT NULL,
  loss         REAL,
  lr           REAL,
  grad_norm    REAL,
  tokens       INTEGER,
  tokens_per_s REAL,
  model_tflops REAL,
  t_s          REAL,
  PRIMARY KEY (run_id, step)
) WITHOUT ROWID;

CREATE TABLE samples (
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  t_s    REAL NOT NULL,
  json   TEXT NOT NULL
);
CREATE INDEX samples_by_run ON samples(run_id, t_s);

CREATE TABLE events (
  id     INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  t_s    REAL NOT NULL,
  type   TEXT NOT NULL,
  json   TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_run ON events(run_id, t_s);

CREATE TABLE checkpoints (
  run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step       INTEGER NOT NULL,
  path       TEXT NOT NULL,
  created_at REAL NOT NULL,
  bytes      INTEGER,
  PRIMARY KEY (run_id, step)
) WITHOUT ROWID;

CREATE TABLE evals (
  run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step       INTEGER NOT NULL,
  loss       REAL,
  perplexity REAL,
  t_s        REAL,
  PRIMARY KEY (run_id, step)
) WITHOUT ROWID;
)sql"},
    {"runs: the plan's predicted and the run's measured step figures", R"sql(
ALTER TABLE runs ADD COLUMN predicted_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE runs ADD COLUMN measured_json TEXT NOT NULL DEFAULT '{}';
)sql"},
};

}  // namespace

std::span<const Migration> run_store_migrations() { return kMigrations; }

Result<int> apply_migrations(SqliteDb& db, std::span<const Migration> migrations) {
  SPW_ASSIGN_OR_RETURN(std::int64_t before, db.query_int("PRAGMA user_version"));
  const auto known = static_cast<std::int64_t>(migrations.size());
  if (before > known) {
    return unsupported("the run database has schema version " + std::to_string(before) +
                       " but this build of Spillway knows only up to " + std::to_string(known) +
                       "; use a newer Spillway or another database file");
  }
  for (std::int64_t v = before; v < known;) {
    SPW_ASSIGN_OR_RETURN(SqliteTransaction tx, SqliteTransaction::begin(db));
    // Another process may have migrated while we waited for the write lock.
    SPW_ASSIGN_OR_RETURN(v, db.query_int("PRAGMA user_version"));
    if (v >= known) break;
    const Migration& m = migrations[static_cast<size_t>(v)];
    Status s = db.exec(m.sql);
    if (!s.ok()) {
      return s.with_context("migration " + std::to_string(v + 1) + " (" + m.description + ")");
    }
    // PRAGMA takes no bound parameters; the value is our own integer.
    SPW_RETURN_IF_ERROR(db.exec("PRAGMA user_version = " + std::to_string(v + 1)));
    SPW_RETURN_IF_ERROR(tx.commit());
    ++v;
  }
  return static_cast<int>(before);
}

}  // namespace spillway
