#include "history/run-store.h"

#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/json-file.h"
#include "core/log.h"
#include "history/process-liveness.h"
#include "history/run-folder.h"
#include "history/schema.h"

namespace spillway {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string tags_to_json(const std::vector<std::string>& tags) {
  return nlohmann::json(tags).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<std::string> tags_from_json(const std::string& text) {
  std::vector<std::string> out;
  // A column the GUI may have edited: anything but a list of strings reads as no tags.
  auto j = parse_json(text, "runs.db tags", ErrorCode::kCorrupt);
  if (!j.ok() || !j->is_array()) return out;
  for (const auto& t : *j) {
    if (t.is_string()) out.push_back(t.get<std::string>());
  }
  return out;
}

// LIKE pattern for a substring, with %, _ and the escape character itself escaped.
std::string like_pattern(const std::string& text) {
  std::string p = "%";
  for (char c : text) {
    if (c == '%' || c == '_' || c == '\\') p += '\\';
    p += c;
  }
  return p + "%";
}

constexpr const char* kRunColumns =
    "id, name, status, created_at, started_at, ended_at, job_json, model_name, model_path, "
    "dataset, "
    "dataset_hash, hardware_json, software_json, run_dir, parent_id, host, boot_id, pid, "
    "pid_start_ticks, "
    "tags, notes, final_loss, final_step, tokens, error_message, predicted_json, measured_json";

RunInfo read_run(const SqliteStmt& s) {
  RunInfo r;
  int c = 0;
  r.id = s.column_text(c++);
  r.name = s.column_text(c++);
  // The CHECK constraint keeps status valid; a hand-edited database falls back to 'interrupted'.
  r.status = run_status_from_name(s.column_text(c++)).value_or(RunStatus::kInterrupted);
  r.created_at = s.column_double(c++);
  r.started_at = s.column_opt_double(c++);
  r.ended_at = s.column_opt_double(c++);
  r.job_json = s.column_text(c++);
  r.model_name = s.column_text(c++);
  r.model_path = s.column_text(c++);
  r.dataset = s.column_text(c++);
  r.dataset_hash = s.column_text(c++);
  r.hardware_json = s.column_text(c++);
  r.software_json = s.column_text(c++);
  r.run_dir = s.column_text(c++);
  r.parent_id = s.column_text(c++);
  r.host = s.column_text(c++);
  r.boot_id = s.column_text(c++);
  r.pid = s.column_opt_int64(c++);
  r.pid_start_ticks = s.column_opt_int64(c++);
  r.tags = tags_from_json(s.column_text(c++));
  r.notes = s.column_text(c++);
  r.final_loss = s.column_opt_double(c++);
  r.final_step = s.column_opt_int64(c++);
  r.tokens = s.column_opt_int64(c++);
  r.error_message = s.column_text(c++);
  r.predicted_json = s.column_text(c++);
  r.measured_json = s.column_text(c++);
  return r;
}

Result<std::string> home_data_dir() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg && xdg[0] == '/') return std::string(xdg) + "/spillway";
  const char* home = std::getenv("HOME");
  std::string h = home && *home ? home : "";
  if (h.empty()) {
    if (const passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir) h = pw->pw_dir;
  }
  if (h.empty()) return not_found("no data directory: set XDG_DATA_HOME or HOME");
  return h + "/.local/share/spillway";
}

}  // namespace

const char* run_status_name(RunStatus s) {
  switch (s) {
    case RunStatus::kRunning:
      return "running";
    case RunStatus::kCompleted:
      return "completed";
    case RunStatus::kFailed:
      return "failed";
    case RunStatus::kInterrupted:
      return "interrupted";
    case RunStatus::kStopped:
      return "stopped";
  }
  return "interrupted";
}

std::optional<RunStatus> run_status_from_name(std::string_view name) {
  for (RunStatus s : {RunStatus::kRunning, RunStatus::kCompleted, RunStatus::kFailed,
                      RunStatus::kInterrupted, RunStatus::kStopped}) {
    if (name == run_status_name(s)) return s;
  }
  return std::nullopt;
}

ProcessIdentity worker_of(const RunInfo& run) {
  ProcessIdentity who;
  who.pid = run.pid.value_or(0);
  if (run.pid_start_ticks) who.start_ticks = static_cast<std::uint64_t>(*run.pid_start_ticks);
  who.boot_id = run.boot_id;
  who.host = run.host;
  return who;
}

Result<std::string> RunStore::default_db_path() {
  SPW_ASSIGN_OR_RETURN(std::string dir, home_data_dir());
  return dir + "/runs.db";
}

Result<std::string> RunStore::default_runs_dir() {
  SPW_ASSIGN_OR_RETURN(std::string dir, home_data_dir());
  return dir + "/runs";
}

RunStore::RunStore(SqliteDb db, std::string path, RunStoreOptions options)
    : db_(std::move(db)), path_(std::move(path)), options_(options) {}

RunStore::~RunStore() = default;

Result<std::unique_ptr<RunStore>> RunStore::open(const std::string& path, RunStoreOptions options) {
  if (path.empty()) return invalid_argument("run database path is empty");
  bool in_memory = path == ":memory:";
  if (!in_memory) {
    std::filesystem::path parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(parent, ec);
      if (ec)
        return io_error("create directory " + parent.string() +
                        " for the run database: " + ec.message());
    }
  }
  SPW_ASSIGN_OR_RETURN(SqliteDb db, SqliteDb::open(path));
  if (int rc = sqlite3_busy_timeout(db.get(), options.busy_timeout_ms); rc != SQLITE_OK) {
    return sqlite_status(rc, "set busy timeout", db.get());
  }
  // Refuse a newer or a damaged schema before changing anything in the file (journal mode
  // included).
  SPW_ASSIGN_OR_RETURN(std::int64_t version, db.query_int("PRAGMA user_version"));
  if (version < 0) {
    return corrupt(damaged_database(
        path, "its schema version is " + std::to_string(version) + ", which no Spillway writes"));
  }
  if (version > static_cast<std::int64_t>(run_store_migrations().size())) {
    return unsupported(path + ": the run database has schema version " + std::to_string(version) +
                       ", newer than this build of Spillway understands (" +
                       std::to_string(run_store_migrations().size()) + "); use a newer Spillway");
  }
  // WAL: readers (GUI) never block the writer (worker) and a killed writer loses nothing committed.
  // synchronous=NORMAL is durable against process crashes, which is what matters here.
  if (!in_memory) {
    SPW_ASSIGN_OR_RETURN(SqliteStmt wal, db.prepare("PRAGMA journal_mode=WAL"));
    SPW_ASSIGN_OR_RETURN(bool row, wal.step());
    if (row && wal.column_text(0) != "wal") {
      log_warn("run database " + path +
               ": WAL mode unavailable (journal_mode=" + wal.column_text(0) + ")");
    }
  }
  SPW_RETURN_IF_ERROR(db.exec("PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL;"));
  Result<int> migrated = apply_migrations(db, run_store_migrations());
  if (!migrated.ok()) return migrated.status().with_context(path);
  std::unique_ptr<RunStore> store(new RunStore(std::move(db), path, options));
  if (options.reconcile_on_open) {
    // Best effort: a database that another process holds locked, or a read-only one, is still
    // opened for reading (History stays readable); its dead workers' runs are marked at a later
    // open.
    if (Result<int> n = store->reconcile(); !n.ok())
      log_warn(path + ": runs of workers that are gone are not marked interrupted yet: " +
               n.status().message());
  }
  return store;
}

// "20250131-142501-3fa9c2": UTC time to the second (sorts with creation time, readable as a folder
// name) plus 24 random bits so two runs started in the same second do not collide.
std::string RunStore::new_run_id() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  static thread_local std::mt19937 rng{std::random_device{}()};
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%06x", static_cast<unsigned>(rng() & 0xffffff));
  return std::string(stamp) + "-" + suffix;
}

Result<int> RunStore::schema_version() {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(std::int64_t v, db_.query_int("PRAGMA user_version"));
  return static_cast<int>(v);
}

Result<std::string> RunStore::insert_run(const RunInfo& r) {
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare(std::string("INSERT INTO runs (") + kRunColumns +
                  ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  s.bind(1, r.id).bind(2, r.name).bind(3, run_status_name(r.status)).bind(4, r.created_at);
  s.bind(5, r.started_at).bind(6, r.ended_at).bind(7, r.job_json).bind(8, r.model_name);
  s.bind(9, r.model_path).bind(10, r.dataset).bind(11, r.dataset_hash).bind(12, r.hardware_json);
  s.bind(13, r.software_json).bind(14, r.run_dir);
  if (r.parent_id.empty()) {
    s.bind_null(15);
  } else {
    s.bind(15, r.parent_id);
  }
  s.bind(16, r.host).bind(17, r.boot_id).bind(18, r.pid).bind(19, r.pid_start_ticks);
  s.bind(20, tags_to_json(r.tags)).bind(21, r.notes).bind(22, r.final_loss).bind(23, r.final_step);
  s.bind(24, r.tokens)
      .bind(25, r.error_message)
      .bind(26, r.predicted_json)
      .bind(27, r.measured_json);
  SPW_RETURN_IF_ERROR(s.run());
  return r.id;
}

Result<std::string> RunStore::create_run(RunInfo info) {
  std::lock_guard lock(mu_);
  double now = unix_now();
  if (info.created_at <= 0) info.created_at = now;
  if (info.status == RunStatus::kRunning) {
    if (!info.started_at) info.started_at = now;
    if (!info.pid) {
      ProcessIdentity self = current_process_identity();
      info.pid = self.pid;
      if (self.start_ticks) info.pid_start_ticks = static_cast<std::int64_t>(*self.start_ticks);
      if (info.boot_id.empty()) info.boot_id = self.boot_id;
      if (info.host.empty()) info.host = self.host;
    }
  }
  if (info.host.empty() && info.pid) info.host = current_host_name();
  if (!info.id.empty()) {
    Result<std::string> id = insert_run(info);
    if (!id.ok()) return id.status().with_context("create run '" + info.id + "'");
    return id;
  }
  // Generated ids can collide only within one second and 1 in 2^24; retry a few times.
  Status last;
  for (int attempt = 0; attempt < 4; ++attempt) {
    info.id = new_run_id();
    Result<std::string> id = insert_run(info);
    if (id.ok()) return id;
    last = id.status();
    if (last.code() != ErrorCode::kInvalidArgument) break;
  }
  return last.with_context("create run");
}

Status RunStore::expect_one_change(const std::string& run_id) {
  if (db_.changes() == 0) return not_found("no run with id '" + run_id + "'");
  return Status();
}

Status RunStore::update_status(const std::string& run_id, RunStatus status,
                               const std::string& error_message) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare(
          "UPDATE runs SET status = ?1, "
          "ended_at = CASE WHEN ?1 = 'running' THEN NULL ELSE COALESCE(ended_at, ?2) END, "
          "error_message = CASE WHEN ?3 = '' THEN error_message ELSE ?3 END WHERE id = ?4"));
  s.bind(1, run_status_name(status)).bind(2, unix_now()).bind(3, error_message).bind(4, run_id);
  SPW_RETURN_IF_ERROR(s.run());
  return expect_one_change(run_id);
}

Status RunStore::finish_run(const std::string& run_id, RunStatus status, const FinalFigures& f) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare(
          "UPDATE runs SET status = ?1, ended_at = ?2, final_loss = COALESCE(?3, final_loss), "
          "final_step = COALESCE(?4, final_step), tokens = COALESCE(?5, tokens), "
          "error_message = CASE WHEN ?6 = '' THEN error_message ELSE ?6 END WHERE id = ?7"));
  s.bind(1, run_status_name(status))
      .bind(2, unix_now())
      .bind(3, f.final_loss)
      .bind(4, f.final_step);
  s.bind(5, f.tokens).bind(6, f.error_message).bind(7, run_id);
  SPW_RETURN_IF_ERROR(s.run());
  return expect_one_change(run_id);
}

Status RunStore::insert_metric(const std::string& run_id, const MetricRow& m) {
  SPW_ASSIGN_OR_RETURN(SqliteStmt s, db_.prepare("INSERT OR REPLACE INTO metrics (run_id, step, "
                                                 "loss, lr, grad_norm, tokens, tokens_per_s, "
                                                 "model_tflops, t_s) VALUES (?,?,?,?,?,?,?,?,?)"));
  s.bind(1, run_id)
      .bind(2, m.step)
      .bind(3, m.loss)
      .bind(4, m.lr)
      .bind(5, m.grad_norm)
      .bind(6, m.tokens);
  s.bind(7, m.tokens_per_s).bind(8, m.model_tflops).bind(9, m.t_s);
  return s.run();
}

Status RunStore::add_metric(const std::string& run_id, const MetricRow& row) {
  std::lock_guard lock(mu_);
  return insert_metric(run_id, row);
}

Status RunStore::add_metrics(const std::string& run_id, const std::vector<MetricRow>& rows) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(SqliteTransaction tx, SqliteTransaction::begin(db_));
  for (const MetricRow& m : rows) SPW_RETURN_IF_ERROR(insert_metric(run_id, m));
  return tx.commit();
}

Result<bool> RunStore::add_sample(const std::string& run_id, double t_s, const std::string& json) {
  std::lock_guard lock(mu_);
  auto it = last_sample_t_.find(run_id);
  // A t_s before the last one means a new time base (a resumed run): store and start over.
  if (it != last_sample_t_.end() && t_s >= it->second &&
      t_s - it->second < options_.min_sample_interval_s) {
    return false;
  }
  SPW_ASSIGN_OR_RETURN(SqliteStmt s,
                       db_.prepare("INSERT INTO samples (run_id, t_s, json) VALUES (?,?,?)"));
  s.bind(1, run_id).bind(2, t_s).bind(3, json);
  SPW_RETURN_IF_ERROR(s.run());
  last_sample_t_[run_id] = t_s;
  return true;
}

Status RunStore::add_event(const std::string& run_id, double t_s, const std::string& type,
                           const std::string& json) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s, db_.prepare("INSERT INTO events (run_id, t_s, type, json) VALUES (?,?,?,?)"));
  s.bind(1, run_id).bind(2, t_s).bind(3, type).bind(4, json.empty() ? std::string("{}") : json);
  return s.run();
}

Status RunStore::add_checkpoint(const std::string& run_id, const CheckpointRow& c) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(SqliteStmt s,
                       db_.prepare("INSERT OR REPLACE INTO checkpoints (run_id, step, path, "
                                   "created_at, bytes) VALUES (?,?,?,?,?)"));
  s.bind(1, run_id).bind(2, c.step).bind(3, c.path).bind(
      4, c.created_at > 0 ? c.created_at : unix_now());
  s.bind(5, c.bytes);
  return s.run();
}

Status RunStore::add_eval(const std::string& run_id, const EvalRow& e) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare(
          "INSERT OR REPLACE INTO evals (run_id, step, loss, perplexity, t_s) VALUES (?,?,?,?,?)"));
  s.bind(1, run_id).bind(2, e.step).bind(3, e.loss).bind(4, e.perplexity).bind(5, e.t_s);
  return s.run();
}

Status RunStore::resume_run(const std::string& run_id, const RunInfo& now, std::int64_t from_step) {
  std::lock_guard lock(mu_);
  RunInfo who = now;
  if (!who.pid) {
    ProcessIdentity self = current_process_identity();
    who.pid = self.pid;
    if (self.start_ticks) who.pid_start_ticks = static_cast<std::int64_t>(*self.start_ticks);
    if (who.boot_id.empty()) who.boot_id = self.boot_id;
    if (who.host.empty()) who.host = self.host;
  }
  if (who.host.empty()) who.host = current_host_name();
  SPW_ASSIGN_OR_RETURN(SqliteTransaction tx, SqliteTransaction::begin(db_));
  {
    SPW_ASSIGN_OR_RETURN(SqliteStmt s,
                         db_.prepare("UPDATE runs SET status = 'running', ended_at = NULL, "
                                     "error_message = '', started_at = COALESCE(started_at, ?1), "
                                     "job_json = ?2, hardware_json = ?3, software_json = ?4, host "
                                     "= ?5, boot_id = ?6, pid = ?7, "
                                     "pid_start_ticks = ?8 WHERE id = ?9"));
    s.bind(1, unix_now())
        .bind(2, who.job_json)
        .bind(3, who.hardware_json)
        .bind(4, who.software_json);
    s.bind(5, who.host)
        .bind(6, who.boot_id)
        .bind(7, who.pid)
        .bind(8, who.pid_start_ticks)
        .bind(9, run_id);
    SPW_RETURN_IF_ERROR(s.run());
    SPW_RETURN_IF_ERROR(expect_one_change(run_id));
  }
  for (const char* table : {"metrics", "evals"}) {
    SPW_ASSIGN_OR_RETURN(SqliteStmt d, db_.prepare(std::string("DELETE FROM ") + table +
                                                   " WHERE run_id = ?1 AND step > ?2"));
    d.bind(1, run_id).bind(2, from_step);
    SPW_RETURN_IF_ERROR(d.run());
  }
  SPW_RETURN_IF_ERROR(tx.commit());
  // The resumed worker's samples continue the events' clock; the next one is stored.
  last_sample_t_.erase(run_id);
  return Status();
}

Result<std::optional<RunInfo>> RunStore::find_run_by_folder(const std::string& run_dir) {
  if (run_dir.empty()) return std::optional<RunInfo>();
  SPW_ASSIGN_OR_RETURN(std::vector<RunInfo> runs, list_runs());
  for (RunInfo& r : runs) {  // newest first
    if (r.run_dir == run_dir || same_folder(r.run_dir, run_dir))
      return std::optional<RunInfo>(std::move(r));
  }
  return std::optional<RunInfo>();
}

Result<std::vector<RunInfo>> RunStore::list_runs(const RunFilter& f) {
  std::lock_guard lock(mu_);
  std::string sql = std::string("SELECT ") + kRunColumns + " FROM runs WHERE 1";
  // Fixed parameter numbers; a clause is added only when its filter is set.
  if (f.status) sql += " AND status = ?1";
  if (!f.text.empty()) {
    sql +=
        " AND (id LIKE ?2 ESCAPE '\\' OR name LIKE ?2 ESCAPE '\\' OR model_name LIKE ?2 ESCAPE '\\'"
        " OR dataset LIKE ?2 ESCAPE '\\' OR notes LIKE ?2 ESCAPE '\\' OR tags LIKE ?2 ESCAPE '\\')";
  }
  if (!f.tag.empty())
    sql += " AND EXISTS (SELECT 1 FROM json_each(runs.tags) WHERE json_each.value = ?3)";
  if (!f.model_name.empty()) sql += " AND model_name = ?4";
  sql += " ORDER BY created_at DESC, id DESC LIMIT ?5 OFFSET ?6";
  SPW_ASSIGN_OR_RETURN(SqliteStmt s, db_.prepare(sql));
  if (f.status) s.bind(1, run_status_name(*f.status));
  if (!f.text.empty()) s.bind(2, like_pattern(f.text));
  if (!f.tag.empty()) s.bind(3, f.tag);
  if (!f.model_name.empty()) s.bind(4, f.model_name);
  s.bind(5, f.limit > 0 ? std::int64_t{f.limit} : std::int64_t{-1});
  s.bind(6, std::int64_t{f.offset > 0 ? f.offset : 0});
  std::vector<RunInfo> out;
  for (;;) {
    SPW_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back(read_run(s));
  }
  return out;
}

Result<RunInfo> RunStore::get_run(const std::string& run_id) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s, db_.prepare(std::string("SELECT ") + kRunColumns + " FROM runs WHERE id = ?"));
  s.bind(1, run_id);
  SPW_ASSIGN_OR_RETURN(bool row, s.step());
  if (!row) return not_found("no run with id '" + run_id + "'");
  return read_run(s);
}

Result<std::vector<MetricRow>> RunStore::metrics(const std::string& run_id) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare(
          "SELECT step, loss, lr, grad_norm, tokens, tokens_per_s, model_tflops, t_s FROM metrics "
          "WHERE run_id = ? ORDER BY step"));
  s.bind(1, run_id);
  std::vector<MetricRow> out;
  for (;;) {
    SPW_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    MetricRow m;
    m.step = s.column_int64(0);
    m.loss = s.column_opt_double(1);
    m.lr = s.column_opt_double(2);
    m.grad_norm = s.column_opt_double(3);
    m.tokens = s.column_opt_int64(4);
    m.tokens_per_s = s.column_opt_double(5);
    m.model_tflops = s.column_opt_double(6);
    m.t_s = s.column_opt_double(7);
    out.push_back(m);
  }
  return out;
}

Result<std::vector<SampleRow>> RunStore::samples(const std::string& run_id) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s, db_.prepare("SELECT t_s, json FROM samples WHERE run_id = ? ORDER BY rowid"));
  s.bind(1, run_id);
  std::vector<SampleRow> out;
  for (;;) {
    SPW_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back({s.column_double(0), s.column_text(1)});
  }
  return out;
}

Result<std::vector<EventRow>> RunStore::events(const std::string& run_id, const std::string& type) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(SqliteStmt s,
                       db_.prepare("SELECT id, t_s, type, json FROM events WHERE run_id = ?1 AND "
                                   "(?2 = '' OR type = ?2) ORDER BY id"));
  s.bind(1, run_id).bind(2, type);
  std::vector<EventRow> out;
  for (;;) {
    SPW_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back({s.column_int64(0), s.column_double(1), s.column_text(2), s.column_text(3)});
  }
  return out;
}

Result<std::vector<CheckpointRow>> RunStore::checkpoints(const std::string& run_id) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare(
          "SELECT step, path, created_at, bytes FROM checkpoints WHERE run_id = ? ORDER BY step"));
  s.bind(1, run_id);
  std::vector<CheckpointRow> out;
  for (;;) {
    SPW_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back({s.column_int64(0), s.column_text(1), s.column_double(2), s.column_opt_int64(3)});
  }
  return out;
}

Result<std::vector<EvalRow>> RunStore::evals(const std::string& run_id) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare("SELECT step, loss, perplexity, t_s FROM evals WHERE run_id = ? ORDER BY step"));
  s.bind(1, run_id);
  std::vector<EvalRow> out;
  for (;;) {
    SPW_ASSIGN_OR_RETURN(bool row, s.step());
    if (!row) break;
    out.push_back({s.column_int64(0), s.column_opt_double(1), s.column_opt_double(2),
                   s.column_opt_double(3)});
  }
  return out;
}

Status RunStore::set_tags(const std::string& run_id, const std::vector<std::string>& tags) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(SqliteStmt s, db_.prepare("UPDATE runs SET tags = ? WHERE id = ?"));
  s.bind(1, tags_to_json(tags)).bind(2, run_id);
  SPW_RETURN_IF_ERROR(s.run());
  return expect_one_change(run_id);
}

Status RunStore::set_step_figures(const std::string& run_id, const std::string& predicted_json,
                                  const std::string& measured_json) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(
      SqliteStmt s,
      db_.prepare("UPDATE runs SET predicted_json = ?, measured_json = ? WHERE id = ?"));
  s.bind(1, predicted_json).bind(2, measured_json).bind(3, run_id);
  SPW_RETURN_IF_ERROR(s.run());
  return expect_one_change(run_id);
}

Status RunStore::set_notes(const std::string& run_id, const std::string& notes) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(SqliteStmt s, db_.prepare("UPDATE runs SET notes = ? WHERE id = ?"));
  s.bind(1, notes).bind(2, run_id);
  SPW_RETURN_IF_ERROR(s.run());
  return expect_one_change(run_id);
}

Status RunStore::rename(const std::string& run_id, const std::string& name) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(SqliteStmt s, db_.prepare("UPDATE runs SET name = ? WHERE id = ?"));
  s.bind(1, name).bind(2, run_id);
  SPW_RETURN_IF_ERROR(s.run());
  return expect_one_change(run_id);
}

Status RunStore::delete_run(const std::string& run_id) {
  std::lock_guard lock(mu_);
  SPW_ASSIGN_OR_RETURN(SqliteStmt s, db_.prepare("DELETE FROM runs WHERE id = ?"));
  s.bind(1, run_id);
  SPW_RETURN_IF_ERROR(s.run());
  // changes() counts only the runs row, not the cascaded children.
  SPW_RETURN_IF_ERROR(expect_one_change(run_id));
  last_sample_t_.erase(run_id);
  return Status();
}

Result<int> RunStore::reconcile() {
  std::lock_guard lock(mu_);
  struct Candidate {
    std::string id;
    ProcessIdentity who;
  };
  std::vector<Candidate> dead;
  {
    SPW_ASSIGN_OR_RETURN(
        SqliteStmt s,
        db_.prepare(
            "SELECT id, pid, pid_start_ticks, boot_id, host FROM runs WHERE status = 'running'"));
    for (;;) {
      SPW_ASSIGN_OR_RETURN(bool row, s.step());
      if (!row) break;
      Candidate c;
      c.id = s.column_text(0);
      c.who.pid = s.column_opt_int64(1).value_or(0);
      if (auto t = s.column_opt_int64(2)) c.who.start_ticks = static_cast<std::uint64_t>(*t);
      c.who.boot_id = s.column_text(3);
      c.who.host = s.column_text(4);
      if (check_process(c.who) == Liveness::kGone) dead.push_back(std::move(c));
    }
  }
  int marked = 0;
  for (const Candidate& c : dead) {
    SPW_ASSIGN_OR_RETURN(
        SqliteStmt u,
        db_.prepare("UPDATE runs SET status = 'interrupted', ended_at = COALESCE(ended_at, ?1), "
                    "error_message = CASE WHEN error_message = '' THEN ?2 ELSE error_message END "
                    "WHERE id = ?3 AND status = 'running'"));
    std::string why =
        "worker process " + std::to_string(c.who.pid) +
        (c.who.host.empty() ? std::string() : " on " + c.who.host) +
        " ended without finishing the run (killed, crashed, or the machine restarted)";
    u.bind(1, unix_now()).bind(2, why).bind(3, c.id);
    SPW_RETURN_IF_ERROR(u.run());
    marked += db_.changes();
  }
  return marked;
}

}  // namespace spillway
