// EventWriter: appends the live protocol of a run, one JSON object a line, to run_dir/events.jsonl.
//
// Every line starts with "type" and "t" (seconds since run start, from the monotonic clock, so a
// wall-clock jump never makes time run backwards), followed by the fields of the payload. The GUI
// tails this file; a person can `tail -f | jq` it. Each line is handed to the kernel with one
// write() (no user-space buffering, so a crash loses at most the line being written), and lines of
// type state, checkpoint and error are also fsync'ed, because those are the ones a restarted GUI or
// a resume must be able to trust. Opening appends: a resumed run continues the same file; if the
// file ends in a torn line (the previous worker was killed mid-write) a newline is added first so
// every later line parses.
//
// Thread-safety: every method may be called from any thread; lines are written whole under a mutex
// and appear in the order the calls took the lock. Ownership: the writer owns its file descriptor
// (closed by the destructor); not copyable or movable — hand out pointers/references.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/log.h"
#include "core/status.h"
#include "events/events.h"
#include "telemetry/span.h"

namespace spillway {

class EventWriter {
 public:
  // Opens (creating if needed, appending otherwise) `run_dir`/events.jsonl. `t_offset_s` is added
  // to every "t": a resumed run passes the t of its last event so the timeline continues instead of
  // restarting at 0. kIo / kNoSpace when the directory or file cannot be opened.
  static Result<std::unique_ptr<EventWriter>> open(const std::string& run_dir,
                                                   double t_offset_s = 0.0);
  // Same, with an explicit file path (tests, or a non-default name).
  static Result<std::unique_ptr<EventWriter>> open_file(const std::string& path,
                                                        double t_offset_s = 0.0);

  // The largest "t" among the last lines of an existing events file (the last 64 KiB are read; torn
  // or non-JSON lines are skipped): the t_offset_s a resumed run passes to open(). Absent when the
  // file is missing, empty or holds no parsable line there.
  static std::optional<double> last_t_s(const std::string& path);

  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Seconds since run start (plus the offset) on the monotonic clock: the time base of every "t",
  // and of span() start/end values.
  double now_s() const;
  const std::string& path() const { return path_; }

  // The typed events (events/events.h); state and checkpoint are fsync'ed.
  Status state(const StateEvent& e);
  Status sample(const SampleEvent& e);
  Status step(const StepEvent& e);
  Status eval(const EvalEvent& e);
  Status checkpoint(const CheckpointEvent& e);

  // {"type":"state","t":..,"state":name, ...extra}. Fsync'ed. Typical names: "starting", "loading",
  // "training", "checkpointing", "stopping", "completed", "failed".
  Status state(std::string_view name, const nlohmann::json& extra = nlohmann::json::object());
  // Tier and link telemetry (see TelemetrySampler for the fields), about 10 Hz.
  Status sample(const nlohmann::json& fields);
  // One optimizer step: the fields of a StepEvent.
  Status step(const nlohmann::json& fields);
  // Timeline: {"block":..,"layer":l or null,"phase":..,"start_s":..,"end_s":..} (span.h); start and
  // end in the now_s() time base.
  Status span(const SpanEvent& span);
  // {"level":"info","message":..}.
  Status log(LogLevel level, std::string_view message);
  // {"code":"io","message":..}. Fsync'ed. The Status overload writes snake_case codes:
  // "invalid_argument", "not_found", "corrupt", "unsupported", "io", "no_space", "out_of_memory",
  // "cancelled", "internal".
  Status error(std::string_view code, std::string_view message);
  Status error(const Status& status);
  // {"step":..,"path":..,"bytes":..} or whatever the trainer records. Fsync'ed.
  Status checkpoint(const nlohmann::json& fields);
  // {"step":..,"loss":..,"perplexity":..}.
  Status eval(const nlohmann::json& fields);
  // Any type. `fields` must be an object (or null for none); a non-object is written under "value".
  // Keys "type" and "t" in `fields` are ignored (the writer owns them).
  Status emit(std::string_view type, const nlohmann::json& fields);

  // A sink for set_log_sink() that forwards every log line into this file as a `log` event.
  // The writer must outlive the installed sink.
  std::function<void(LogLevel, const std::string&)> log_sink();

  // Lines written by this writer so far (tests, diagnostics).
  std::uint64_t lines_written() const;

 private:
  EventWriter(int fd, std::string path, double t_offset_s);
  Status write_line(std::string_view type, const nlohmann::json& fields, bool durable);

  int fd_ = -1;
  std::string path_;
  double t_offset_s_ = 0.0;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  std::uint64_t lines_ = 0;
};

}  // namespace spillway
