#include "core/status.h"

#include <cerrno>
#include <cstring>

namespace spillway {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kCorrupt:
      return "corrupt";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kIo:
      return "i/o error";
    case ErrorCode::kNoSpace:
      return "no space";
    case ErrorCode::kOutOfMemory:
      return "out of memory";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(error_code_name(code_)) + ": " + message_;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status errno_status(const std::string& what, int err) {
  std::string m = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) {
    return no_space(m + " (free space on that disk or choose another folder)");
  }
  if (err == ENOENT) return not_found(m);
  return io_error(m);
}

}  // namespace spillway
