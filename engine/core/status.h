// Status and Result<T>: errors as values for every engine call (leveldb's Status, std::expected).
//
// A Status is either ok or carries a code and a message a person can act on: what failed, where
// (file, tensor, line), and what to do. Result<T> holds either a T or a non-ok Status.
// Both are plain values: copyable, movable, no shared state, safe to pass between threads.
// A library function never calls exit() and never asserts on I/O; it returns one of these.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace spillway {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // bad input from the user: a job key, a flag, a malformed line
  kNotFound,         // a file, tensor or key that should exist does not
  kCorrupt,          // a file exists but its content is inconsistent (safetensors header, checksum)
  kUnsupported,      // valid input we do not handle (architecture, dtype)
  kIo,               // the OS refused: open, read, write, fsync, rename
  kNoSpace,          // the disk or a memory tier is full
  kOutOfMemory,      // an allocation failed or a job does not fit
  kCancelled,        // stopped by the user (SIGTERM) or a caller
  kInternal,         // a bug: an invariant did not hold
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: model.safetensors: tensor 'x' ..." — for logs and error events.
  std::string to_string() const;
  // Returns a copy with "context: " put in front of the message (e.g. the file being read).
  Status with_context(const std::string& context) const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {ErrorCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) {
  return {ErrorCode::kNotFound, std::move(m)};
}
inline Status corrupt(std::string m) {
  return {ErrorCode::kCorrupt, std::move(m)};
}
inline Status unsupported(std::string m) {
  return {ErrorCode::kUnsupported, std::move(m)};
}
inline Status io_error(std::string m) {
  return {ErrorCode::kIo, std::move(m)};
}
inline Status no_space(std::string m) {
  return {ErrorCode::kNoSpace, std::move(m)};
}
inline Status out_of_memory(std::string m) {
  return {ErrorCode::kOutOfMemory, std::move(m)};
}
inline Status cancelled(std::string m) {
  return {ErrorCode::kCancelled, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {ErrorCode::kInternal, std::move(m)};
}
// An I/O failure from errno: "what: strerror(errno)", mapped to kNoSpace for ENOSPC/EDQUOT.
Status errno_status(const std::string& what, int err);

// Either a value or an error. Constructing from an ok Status is a bug (kInternal).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design, like std::expected
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = internal_error("Result constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace spillway

#define SPW_CONCAT_INNER(a, b) a##b
#define SPW_CONCAT(a, b) SPW_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not ok.
#define SPW_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::spillway::Status spw_status_ = (expr);   \
    if (!spw_status_.ok()) return spw_status_; \
  } while (0)

// `SPW_ASSIGN_OR_RETURN(auto x, f());` — binds the value or returns the error.
#define SPW_ASSIGN_OR_RETURN(lhs, expr) \
  SPW_ASSIGN_OR_RETURN_IMPL(SPW_CONCAT(spw_r_, __LINE__), lhs, expr)
#define SPW_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
