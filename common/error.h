// The one error vocabulary of kvgate: errors are values, never exceptions across module boundaries.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace kvgate {

enum class ErrorCode {
  kInvalidArgument,    // the caller's input is malformed or out of range
  kNotFound,           // a named thing (model, thread, file) does not exist
  kUnauthenticated,    // missing or wrong credentials
  kPermissionDenied,   // credentials valid but not allowed
  kResourceExhausted,  // a limit was hit (body size, pool capacity, rate)
  kUnavailable,        // a dependency (upstream, disk) cannot be reached right now
  kDeadlineExceeded,   // a deadline expired
  kCorruptData,        // a file or peer sent bytes that violate their format
  kInternal,           // a broken internal invariant
  kCancelled,          // the caller cancelled the operation before it completed
};

std::string_view ErrorCodeName(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  std::string ToString() const;
};

template <class T>
using Result = std::expected<T, Error>;

// Status-like result for operations that return nothing.
using Status = std::expected<void, Error>;

inline std::unexpected<Error> MakeError(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

}  // namespace kvgate
