#include "telemetry/event-writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>

#include "core/file-util.h"

namespace spillway {
namespace {

using Json = nlohmann::json;

std::string dump(const Json& j) {
  // Log messages can carry arbitrary bytes (file names, tokenizer pieces): replace invalid UTF-8
  // instead of throwing.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Finite numbers as JSON numbers; NaN/Inf would become null in nlohmann, so say so explicitly here.
// Machine-readable code for the `error` event (error_code_name() is for people: "i/o error").
const char* error_code_key(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kNotFound:
      return "not_found";
    case ErrorCode::kCorrupt:
      return "corrupt";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kNoSpace:
      return "no_space";
    case ErrorCode::kOutOfMemory:
      return "out_of_memory";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

}  // namespace

Result<std::unique_ptr<EventWriter>> EventWriter::open(const std::string& run_dir,
                                                       double t_offset_s) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) return io_error("create run directory " + run_dir + ": " + ec.message());
  return open_file(run_dir + "/events.jsonl", t_offset_s);
}

Result<std::unique_ptr<EventWriter>> EventWriter::open_file(const std::string& path,
                                                            double t_offset_s) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status("open " + path, errno);
  // A previous worker killed mid-line leaves a torn last line; terminate it so ours parse.
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    int rfd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    char last = '\n';
    if (rfd >= 0) {
      if (::pread(rfd, &last, 1, st.st_size - 1) != 1) last = '\n';
      ::close(rfd);
    }
    if (last != '\n') {
      Status s = write_all(fd, "\n", 1, path);
      if (!s.ok()) {
        ::close(fd);
        return s;
      }
    }
  }
  return std::unique_ptr<EventWriter>(new EventWriter(fd, path, t_offset_s));
}

std::optional<double> EventWriter::last_t_s(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    ::close(fd);
    return std::nullopt;
  }
  constexpr off_t kTail = 64 * 1024;
  off_t start = st.st_size > kTail ? st.st_size - kTail : 0;
  std::string buf(static_cast<size_t>(st.st_size - start), '\0');
  ssize_t n = ::pread(fd, buf.data(), buf.size(), start);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buf.resize(static_cast<size_t>(n));
  std::optional<double> best;
  size_t pos = 0;
  while (pos < buf.size()) {
    size_t nl = buf.find('\n', pos);
    size_t end = nl == std::string::npos ? buf.size() : nl;
    Json j = Json::parse(buf.begin() + static_cast<std::ptrdiff_t>(pos),
                         buf.begin() + static_cast<std::ptrdiff_t>(end), nullptr,
                         /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("t") && j["t"].is_number()) {
      double t = j["t"].get<double>();
      if (!best || t > *best) best = t;
    }
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return best;
}

EventWriter::EventWriter(int fd, std::string path, double t_offset_s)
    : fd_(fd),
      path_(std::move(path)),
      t_offset_s_(t_offset_s),
      start_(std::chrono::steady_clock::now()) {}

EventWriter::~EventWriter() {
  if (fd_ >= 0) {
    ::fsync(fd_);
    ::close(fd_);
  }
}

double EventWriter::now_s() const {
  return t_offset_s_ +
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::uint64_t EventWriter::lines_written() const {
  std::lock_guard lock(mu_);
  return lines_;
}

Status EventWriter::write_line(std::string_view type, const Json& fields, bool durable) {
  // "type" and "t" first, then the payload's fields: built as text because nlohmann::json sorts
  // keys.
  std::string line = "{\"type\":";
  line += dump(Json(std::string(type)));
  line += ",\"t\":";
  std::lock_guard lock(mu_);
  line += dump(Json(std::round(now_s() * 1e6) / 1e6));  // microsecond resolution is plenty
  if (fields.is_object()) {
    for (auto it = fields.begin(); it != fields.end(); ++it) {
      if (it.key() == "type" || it.key() == "t") continue;
      line += ',';
      line += dump(Json(it.key()));
      line += ':';
      line += dump(it.value());
    }
  } else if (!fields.is_null()) {
    line += ",\"value\":";
    line += dump(fields);
  }
  line += "}\n";
  SPW_RETURN_IF_ERROR(write_all(fd_, line.data(), line.size(), path_));
  ++lines_;
  if (durable && ::fsync(fd_) != 0) return errno_status("fsync " + path_, errno);
  return Status();
}

Status EventWriter::state(const StateEvent& e) {
  return write_line(event_type_name(EventType::kState), to_json(e), true);
}

Status EventWriter::sample(const SampleEvent& e) {
  return sample(to_json(e));
}

Status EventWriter::step(const StepEvent& e) {
  return step(to_json(e));
}

Status EventWriter::eval(const EvalEvent& e) {
  return eval(to_json(e));
}

Status EventWriter::checkpoint(const CheckpointEvent& e) {
  return checkpoint(to_json(e));
}

Status EventWriter::state(std::string_view name, const Json& extra) {
  Json fields = extra.is_object() ? extra : Json::object();
  StateEvent e;
  e.state = name;
  fields.update(to_json(e));
  return write_line(event_type_name(EventType::kState), fields, /*durable=*/true);
}

Status EventWriter::sample(const Json& fields) {
  return write_line(event_type_name(EventType::kSample), fields, false);
}

Status EventWriter::step(const Json& fields) {
  return write_line(event_type_name(EventType::kStep), fields, false);
}

Status EventWriter::span(const SpanEvent& span) {
  return write_line(event_type_name(EventType::kSpan), to_json(span), false);
}

Status EventWriter::log(LogLevel level, std::string_view message) {
  return write_line(event_type_name(EventType::kLog),
                    to_json(LogEvent{log_level_name(level), std::string(message)}), false);
}

Status EventWriter::error(std::string_view code, std::string_view message) {
  return write_line(event_type_name(EventType::kError),
                    to_json(ErrorEvent{std::string(code), std::string(message)}),
                    /*durable=*/true);
}

Status EventWriter::error(const Status& status) {
  return error(error_code_key(status.code()), status.message());
}

Status EventWriter::checkpoint(const Json& fields) {
  return write_line(event_type_name(EventType::kCheckpoint), fields, true);
}

Status EventWriter::eval(const Json& fields) {
  return write_line(event_type_name(EventType::kEval), fields, false);
}

Status EventWriter::emit(std::string_view type, const Json& fields) {
  const std::optional<EventType> known = parse_event_type(type);
  const bool durable =
      known == EventType::kState || known == EventType::kCheckpoint || known == EventType::kError;
  return write_line(type, fields, durable);
}

std::function<void(LogLevel, const std::string&)> EventWriter::log_sink() {
  // Must not log from here: log_message() holds its own mutex while calling the sink.
  return [this](LogLevel level, const std::string& message) { (void)log(level, message); };
}

}  // namespace spillway
