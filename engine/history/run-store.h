// RunStore: the history of training runs in one SQLite database (default
// $XDG_DATA_HOME/spillway/runs.db), shared by the worker, which writes its own run's rows, and the
// GUI, which reads and writes only what the user edits (name, tags, notes, deletions).
//
// Tables: runs (one row per run: status, times, the full resolved job, model, dataset, machine,
// liveness identity, tags, notes, final figures), metrics (one row per optimizer step), samples
// (telemetry, downsampled to at most one per min_sample_interval_s), events (log/error/checkpoint/
// eval/state lines worth keeping), checkpoints, evals. Child rows are deleted with their run.
// Schema changes are numbered migrations (history/schema.h). The database runs in WAL mode with a
// busy timeout, so a GUI reading while a worker writes neither blocks nor fails.
//
// Liveness: a run created as 'running' records its worker's pid, process start time, boot id and
// host. open() (and reconcile()) marks every 'running' run of this host whose process is gone as
// 'interrupted' — that is how a SIGKILLed or crashed worker's run shows up. Rows already written
// stay.
//
// Times: created_at/started_at/ended_at are unix seconds (UTC, fractional); t_s fields are seconds
// since run start in the events.jsonl time base.
//
// Thread-safety: every method may be called from any thread; calls are serialized by an internal
// mutex (one connection). Several processes may open the same file. Ownership: RunStore owns its
// connection (closed by the destructor); not copyable or movable, so open() returns a unique_ptr.
// Files of a run (its run_dir) belong to the caller: delete_run removes rows only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "history/process-liveness.h"
#include "history/sqlite-util.h"

namespace spillway {

enum class RunStatus { kRunning, kCompleted, kFailed, kInterrupted, kStopped };
// "running", "completed", "failed", "interrupted", "stopped" — the strings stored in runs.status.
const char* run_status_name(RunStatus s);
std::optional<RunStatus> run_status_from_name(std::string_view name);

struct RunInfo {
  std::string id;  // empty on create_run: generated ("20250131-142501-3fa9c2", sortable by time)
  std::string name;
  RunStatus status = RunStatus::kRunning;
  double created_at = 0;             // unix s; 0 on create_run: now
  std::optional<double> started_at;  // create_run of a running run: now when absent
  std::optional<double> ended_at;
  std::string job_json = "{}";  // the full resolved job, as the worker ran it
  std::string model_name;       // e.g. "Llama-3.2-1B"
  std::string model_path;
  std::string dataset;       // path or name as the user chose it
  std::string dataset_hash;  // content hash, so "same data" is checkable
  std::string hardware_json = "{}";
  std::string software_json = "{}";
  std::string run_dir;
  std::string parent_id;  // the run this one resumed or was cloned from; "" for none
  // Liveness identity of the worker (see process-liveness.h). create_run of a running run without a
  // pid records the calling process.
  std::string host;
  std::string boot_id;
  std::optional<std::int64_t> pid;
  std::optional<std::int64_t> pid_start_ticks;
  std::vector<std::string> tags;
  std::string notes;
  std::optional<double> final_loss;
  std::optional<std::int64_t> final_step;
  std::optional<std::int64_t> tokens;  // tokens trained on
  std::string error_message;           // why it failed / was interrupted
  // The run's step figures (train/run-figures.h: step_s, tokens_per_s, peak_hbm_bytes,
  // peak_dram_bytes, h2d_bytes, d2h_bytes; null where absent) as its plan predicted them and as
  // its steps measured them; "{}" until the run has trained a step.
  std::string predicted_json = "{}";
  std::string measured_json = "{}";
};

// The liveness identity of the worker `run` recorded (pid, its start time, boot id, host), for
// check_process (process-liveness.h); pid 0 when none was recorded.
ProcessIdentity worker_of(const RunInfo& run);

struct MetricRow {
  std::int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> lr;
  std::optional<double> grad_norm;     // before clipping
  std::optional<std::int64_t> tokens;  // cumulative tokens after this step
  std::optional<double> tokens_per_s;
  std::optional<double> model_tflops;  // achieved model TFLOPS (6·N·tokens/s rule, PaLM appendix B)
  std::optional<double> t_s;
};

struct SampleRow {
  double t_s = 0;
  std::string json;  // the `sample` event's fields
};

struct EventRow {
  std::int64_t id = 0;  // insertion order
  double t_s = 0;
  std::string type;  // "log", "error", "checkpoint", "eval", "state", ...
  std::string json;
};

struct CheckpointRow {
  std::int64_t step = 0;
  std::string path;
  double created_at = 0;  // unix s; 0 on add: now
  std::optional<std::int64_t> bytes;
};

struct EvalRow {
  std::int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> perplexity;  // exp(loss) unless the caller computed it otherwise
  std::optional<double> t_s;
};

// The figures a run ends with.
struct FinalFigures {
  std::optional<double> final_loss;
  std::optional<std::int64_t> final_step;
  std::optional<std::int64_t> tokens;
  std::string error_message;
};

struct RunFilter {
  std::optional<RunStatus> status;
  std::string
      text;         // substring of id, name, model, dataset, notes or tags (case-insensitive ASCII)
  std::string tag;  // exact tag
  std::string model_name;  // exact model name
  int limit = 0;           // 0: all
  int offset = 0;
};

struct RunStoreOptions {
  // add_sample stores a run's sample only when its t_s is at least this far after the last stored
  // one.
  double min_sample_interval_s = 1.0;
  // How long a write waits for another process's write lock before failing with kIo.
  int busy_timeout_ms = 5000;
  // Run reconcile() during open(); a reconcile that cannot write (runs.db locked by another
  // process, or read-only) is logged and the store opens for reading all the same.
  bool reconcile_on_open = true;
};

class RunStore {
 public:
  // Opens (creating the file and its parent directories) and migrates the database, then reconciles
  // dead runs. ":memory:" opens a private in-memory database (tests). kIo when the file cannot be
  // opened, kCorrupt when it is not a database, kUnsupported when its schema is newer than this
  // build.
  static Result<std::unique_ptr<RunStore>> open(const std::string& path,
                                                RunStoreOptions options = {});

  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  // $XDG_DATA_HOME/spillway/runs.db, else ~/.local/share/spillway/runs.db (XDG Base Directory spec:
  // a relative XDG_DATA_HOME is ignored). kNotFound when neither XDG_DATA_HOME nor a home is known.
  static Result<std::string> default_db_path();
  // The folder that holds one subfolder per run: .../spillway/runs.
  static Result<std::string> default_runs_dir();

  // "20250131-142501-3fa9c2": UTC time to the second (sorts with creation time, readable as a
  // folder name) plus 24 random bits so two runs started in the same second do not collide.
  static std::string new_run_id();

  const std::string& path() const { return path_; }
  // PRAGMA user_version of the open database.
  Result<int> schema_version();

  // Inserts a run; returns its id. kInvalidArgument when the id exists already.
  Result<std::string> create_run(RunInfo info);
  // Sets status (and error_message when non-empty); leaving 'running' sets ended_at when unset.
  // kNotFound for an unknown id.
  Status update_status(const std::string& run_id, RunStatus status,
                       const std::string& error_message = {});
  // Ends a run: status, ended_at = now, final figures (absent ones keep their stored value).
  Status finish_run(const std::string& run_id, RunStatus status, const FinalFigures& figures = {});

  // One optimizer step; a step already stored (a resumed run redoing steps after its last
  // checkpoint) is replaced.
  Status add_metric(const std::string& run_id, const MetricRow& row);
  // Many steps in one transaction.
  Status add_metrics(const std::string& run_id, const std::vector<MetricRow>& rows);
  // Stores a telemetry sample unless one of this run was stored less than min_sample_interval_s
  // earlier (by t_s). Returns whether it was stored.
  Result<bool> add_sample(const std::string& run_id, double t_s, const std::string& json);
  Status add_event(const std::string& run_id, double t_s, const std::string& type,
                   const std::string& json);
  Status add_checkpoint(const std::string& run_id, const CheckpointRow& row);
  Status add_eval(const std::string& run_id, const EvalRow& row);

  // A run taken up again from its checkpoint at `from_step` (a resume: the same run, one row). In
  // one transaction its row becomes 'running' again with `now`'s worker (pid, pid_start_ticks,
  // boot_id, host; the calling process when now.pid is unset), job_json, hardware_json and
  // software_json, with ended_at and error_message cleared; its id, name, tags, notes, parent,
  // run_dir, created_at and started_at stay. Its metrics and evals after `from_step` go: the
  // resumed run trains those steps again, so a resume from an earlier checkpoint replaces them
  // instead of leaving the abandoned ones beside the new. Checkpoints, samples and events stay.
  // kNotFound for an unknown id.
  Status resume_run(const std::string& run_id, const RunInfo& now, std::int64_t from_step);

  // The newest run whose run_dir is `run_dir` (the same folder however it is spelled:
  // history/run-folder.h same_folder); nullopt when there is none.
  Result<std::optional<RunInfo>> find_run_by_folder(const std::string& run_dir);

  // Newest first.
  Result<std::vector<RunInfo>> list_runs(const RunFilter& filter = {});
  // kNotFound for an unknown id.
  Result<RunInfo> get_run(const std::string& run_id);
  // Ordered by step / t_s / insertion.
  Result<std::vector<MetricRow>> metrics(const std::string& run_id);
  Result<std::vector<SampleRow>> samples(const std::string& run_id);
  // All events of the run, or only those of `type` when non-empty.
  Result<std::vector<EventRow>> events(const std::string& run_id, const std::string& type = {});
  Result<std::vector<CheckpointRow>> checkpoints(const std::string& run_id);
  Result<std::vector<EvalRow>> evals(const std::string& run_id);

  // Stores the run's predicted and measured step figures (JSON objects). kNotFound for an unknown
  // id.
  Status set_step_figures(const std::string& run_id, const std::string& predicted_json,
                          const std::string& measured_json);

  // User edits. kNotFound for an unknown id.
  Status set_tags(const std::string& run_id, const std::vector<std::string>& tags);
  Status set_notes(const std::string& run_id, const std::string& notes);
  Status rename(const std::string& run_id, const std::string& name);
  // Deletes the run and its child rows (not its files). kNotFound for an unknown id.
  Status delete_run(const std::string& run_id);

  // Marks every 'running' run of this host whose worker process is gone as 'interrupted' (ended_at
  // = now, error_message says so). Returns how many were marked.
  Result<int> reconcile();

 private:
  RunStore(SqliteDb db, std::string path, RunStoreOptions options);
  Result<std::string> insert_run(const RunInfo& info);
  Status insert_metric(const std::string& run_id, const MetricRow& row);
  Status expect_one_change(const std::string& run_id);

  std::mutex mu_;
  SqliteDb db_;
  std::string path_;
  RunStoreOptions options_;
  std::map<std::string, double> last_sample_t_;  // run id -> t_s of the last stored sample
};

}  // namespace spillway
