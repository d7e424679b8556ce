// Status and StatusOr<T>: errors as values.
//
// A Status is OK or carries a canonical code and a message. The OK status
// holds no allocation (LevelDB's trick: a null pointer), so returning OK on a
// hot path costs a pointer copy. "Does not fit" is not an error: the engine
// reports that through its own outcomes; a Status says the input or the
// environment is wrong.
//
// Thread-safety: values; a const Status may be read from many threads.
//
// Example:
//   StatusOr<int> ParsePort(std::string_view s);
//   ROTA_ASSIGN_OR_RETURN(int port, ParsePort(text));
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rota {

// Canonical codes, after Abseil's.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
  // rota's own: the store could not write (disk full, read-only, I/O error);
  // the change was not made. HTTP 507.
  kInsufficientStorage = 100,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return Status(); }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  std::string_view message() const;
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "prefix: message" (adds context on the way up).
  Status WithPrefix(std::string_view prefix) const;

  // Explicitly drop a status the caller has decided not to act on.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code() == b.code() && a.message() == b.message();
  }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status FailedPreconditionError(std::string message);
Status PermissionDeniedError(std::string message);
Status InsufficientStorageError(std::string message);
Status DataLossError(std::string message);
Status ResourceExhaustedError(std::string message);
Status OutOfRangeError(std::string message);
Status UnimplementedError(std::string message);
Status InternalError(std::string message);
Status UnavailableError(std::string message);
Status DeadlineExceededError(std::string message);

// A T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}  // NOLINT: implicit by design
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = InternalError("StatusOr constructed from OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok()
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace rota

#define ROTA_CONCAT_INNER_(a, b) a##b
#define ROTA_CONCAT_(a, b) ROTA_CONCAT_INNER_(a, b)

#define ROTA_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::rota::Status rota_status_ = (expr);     \
    if (!rota_status_.ok()) return rota_status_; \
  } while (0)

#define ROTA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#define ROTA_ASSIGN_OR_RETURN(lhs, expr) \
  ROTA_ASSIGN_OR_RETURN_IMPL_(ROTA_CONCAT_(rota_statusor_, __LINE__), lhs, expr)
