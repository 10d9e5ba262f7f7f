#include "history/schema.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/json-file.h"

namespace spillway {
namespace {

// Migration 3. Until 2026-11 a resume inserted a second row for the same run folder (History
// listed the run twice, Compare drew it from its resume step only, its tags and notes stayed on
// the first row). Each such row is merged into the row it resumed, so that old databases read as
// new ones write: one row per run.
//  - A row is a resume when its first step is above 1 (it began from a checkpoint). Rows of one
//    folder (the same run_dir text: Resume passed the row's own folder) are taken in creation
//    order; a resume merges into the latest earlier row that is not itself merged away. A row that
//    starts at step 1 is a new run trained into the same folder and stays a row of its own; a row
//    with no steps (failed or stopped before its first) names no step to continue from and stays
//    too.
//  - The merged row keeps the first row's id, name, created_at, started_at and parent, and takes
//    the later row's state: status, ended_at, job, machine, worker, final figures, error message
//    and step figures. Tags are the union (first row's first); notes are both when they differ.
//  - Metrics and evals of the first row from the resume's first step on are replaced by the
//    resume's (a resume from an earlier checkpoint trained them again); checkpoints take the
//    resume's where both have one; samples and events move over. Rows that named the merged row as
//    their parent name the merged-into row.
Status merge_resumed_rows(SqliteDb& db) {
  struct Row {
    std::string id, run_dir, name, notes, tags;
    std::optional<std::int64_t> first_step;
  };
  std::vector<Row> rows;
  {
    SPW_ASSIGN_OR_RETURN(SqliteStmt s,
                         db.prepare("SELECT id, run_dir, name, notes, tags, (SELECT MIN(step) FROM "
                                    "metrics WHERE run_id = runs.id) FROM runs "
                                    "WHERE run_dir != '' AND run_dir IN (SELECT run_dir FROM runs "
                                    "GROUP BY run_dir HAVING COUNT(*) > 1) "
                                    "ORDER BY run_dir, created_at, id"));
    for (;;) {
      SPW_ASSIGN_OR_RETURN(bool row, s.step());
      if (!row) break;
      rows.push_back({s.column_text(0), s.column_text(1), s.column_text(2), s.column_text(3),
                      s.column_text(4), s.column_opt_int64(5)});
    }
  }
  // ?1 the row merged into, ?2 the row merged, ?3 the resume's first step (as the statement uses
  // them).
  auto exec = [&](const char* sql, const std::string& into, const std::string& from,
                  std::int64_t step = 0) -> Status {
    SPW_ASSIGN_OR_RETURN(SqliteStmt s, db.prepare(sql));
    const int n = sqlite3_bind_parameter_count(s.get());
    if (n >= 1) s.bind(1, into);
    if (n >= 2) s.bind(2, from);
    if (n >= 3) s.bind(3, step);
    return s.run();
  };
  std::map<std::string, Row> survivor;  // run_dir -> the row later resumes merge into
  for (const Row& r : rows) {
    auto it = survivor.find(r.run_dir);
    const bool resume = r.first_step && *r.first_step > 1;
    if (it == survivor.end() || !resume) {
      if (it == survivor.end() || r.first_step) survivor[r.run_dir] = r;
      continue;
    }
    Row& into = it->second;
    const std::int64_t from = *r.first_step;
    SPW_RETURN_IF_ERROR(
        exec("DELETE FROM metrics WHERE run_id = ?1 AND step >= ?3", into.id, r.id, from));
    SPW_RETURN_IF_ERROR(
        exec("DELETE FROM evals WHERE run_id = ?1 AND step >= ?3", into.id, r.id, from));
    SPW_RETURN_IF_ERROR(exec("UPDATE metrics SET run_id = ?1 WHERE run_id = ?2", into.id, r.id));
    SPW_RETURN_IF_ERROR(
        exec("UPDATE OR REPLACE evals SET run_id = ?1 WHERE run_id = ?2", into.id, r.id));
    SPW_RETURN_IF_ERROR(
        exec("UPDATE OR REPLACE checkpoints SET run_id = ?1 WHERE run_id = ?2", into.id, r.id));
    SPW_RETURN_IF_ERROR(exec("UPDATE samples SET run_id = ?1 WHERE run_id = ?2", into.id, r.id));
    SPW_RETURN_IF_ERROR(exec("UPDATE events SET run_id = ?1 WHERE run_id = ?2", into.id, r.id));
    SPW_RETURN_IF_ERROR(
        exec("UPDATE runs SET (status, ended_at, job_json, model_name, model_path, dataset, "
             "dataset_hash, hardware_json, "
             "software_json, host, boot_id, pid, pid_start_ticks, final_loss, final_step, tokens, "
             "error_message, "
             "predicted_json, measured_json) = (SELECT status, ended_at, job_json, model_name, "
             "model_path, dataset, "
             "dataset_hash, hardware_json, software_json, host, boot_id, pid, pid_start_ticks, "
             "final_loss, final_step, "
             "tokens, error_message, predicted_json, measured_json FROM runs WHERE id = ?2) WHERE "
             "id = ?1",
             into.id, r.id));
    // Tags: the union, in order; notes: both when they differ.
    // core/json-file: a tags column the GUI wrote is still the user's (no nesting past 100 levels).
    auto parsed = parse_json(into.tags, "runs.db tags", ErrorCode::kCorrupt);
    nlohmann::json tags = parsed.ok() && parsed->is_array() ? *parsed : nlohmann::json::array();
    const auto more = parse_json(r.tags, "runs.db tags", ErrorCode::kCorrupt);
    if (more.ok() && more->is_array()) {
      for (const auto& t : *more)
        if (std::find(tags.begin(), tags.end(), t) == tags.end()) tags.push_back(t);
    }
    into.tags = tags.dump();
    if (!r.notes.empty() && r.notes != into.notes)
      into.notes = into.notes.empty() ? r.notes : into.notes + "\n\n" + r.notes;
    if (into.name.empty()) into.name = r.name;
    {
      SPW_ASSIGN_OR_RETURN(
          SqliteStmt u,
          db.prepare("UPDATE runs SET tags = ?1, notes = ?2, name = ?3 WHERE id = ?4"));
      u.bind(1, into.tags).bind(2, into.notes).bind(3, into.name).bind(4, into.id);
      SPW_RETURN_IF_ERROR(u.run());
    }
    SPW_RETURN_IF_ERROR(exec("UPDATE runs SET parent_id = ?1 WHERE parent_id = ?2", into.id, r.id));
    SPW_RETURN_IF_ERROR(exec("DELETE FROM runs WHERE id = ?2", into.id, r.id));
  }
  return Status();
}

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
    {"runs: a resumed run is one row (the rows a resume added are merged into the run they "
     "resumed)",
     "", merge_resumed_rows},
};

}  // namespace

std::span<const Migration> run_store_migrations() {
  return kMigrations;
}

namespace {

// user_version is a signed 32-bit field of the file's header, which only a damaged or foreign file
// has negative (it would index the migrations before the first).
Status negative_version(std::int64_t v) {
  return corrupt("the database has schema version " + std::to_string(v) +
                 ", which no Spillway writes: it is damaged or not a Spillway run database");
}

}  // namespace

Result<int> apply_migrations(SqliteDb& db, std::span<const Migration> migrations) {
  SPW_ASSIGN_OR_RETURN(std::int64_t before, db.query_int("PRAGMA user_version"));
  const auto known = static_cast<std::int64_t>(migrations.size());
  if (before < 0) return negative_version(before);
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
    if (v < 0) return negative_version(v);
    const Migration& m = migrations[static_cast<size_t>(v)];
    Status s = db.exec(m.sql);
    if (s.ok() && m.apply) s = m.apply(db);
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
