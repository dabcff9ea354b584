// Errors as values at the boundaries (leveldb `Status` style).
//
// A `Status` carries a code and a message a user can act on ("train.lr: must be > 0, got -1").
// `Result<T>` is a value or a Status. Both are plain value types; thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace adctl {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad spec, bad flag, malformed input
  kNotFound,            // missing file, unknown job id
  kAlreadyExists,       // duplicate submission id with a different spec
  kFailedPrecondition,  // e.g. resume of a job that is not paused
  kDataLoss,            // corrupt checkpoint, checksum mismatch
  kUnavailable,         // peer or coordinator unreachable (retryable)
  kDeadlineExceeded,    // rendezvous timeout
  kPermissionDenied,    // wrong token
  kCancelled,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: train.lr: must be > 0".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace adctl

#define ADCTL_RETURN_IF_ERROR(expr) \
  do {                              \
    ::adctl::Status _st = (expr);   \
    if (!_st.ok()) return _st;      \
  } while (0)
