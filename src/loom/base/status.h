// Errors as values: Status and Result<T>, which gain context as they travel up the stack.
// A bad file, request or flag ends in one clear message and a non-zero exit, never an abort.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

namespace loom {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad flag, request or input value
  kNotFound,           // missing file, tensor, key
  kOutOfRange,         // index or offset beyond bounds (truncated files land here)
  kDataLoss,           // corrupt or hostile file content
  kUnimplemented,      // valid input we do not support (yet)
  kFailedPrecondition, // state does not allow the call
  kResourceExhausted,  // memory, context length, queue
  kUnavailable,        // device or service not present
  kCancelled,
  kDeadlineExceeded,
  kInternal,           // broken invariant inside Loom
};

std::string_view status_code_name(StatusCode code);

// Cheap when OK (one null pointer); carries code, message and a context trail otherwise.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status ok_status() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // Outermost context first ("loading model: reading GGUF x.gguf: <message>").
  std::string to_string() const;

  // Adds a context frame; returns *this for chaining. No-op on OK.
  Status& with_context(std::string context) &;
  Status&& with_context(std::string context) &&;

 private:
  struct State {
    StatusCode code;
    std::string message;
    std::vector<std::string> context;  // innermost first
  };
  std::unique_ptr<State> state_;
};

template <typename... Args>
Status make_error(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
#define LOOM_ERROR_FN(name, code)                                              \
  template <typename... Args>                                                  \
  Status name(fmt::format_string<Args...> f, Args&&... args) {                 \
    return Status(StatusCode::code, fmt::format(f, std::forward<Args>(args)...)); \
  }
LOOM_ERROR_FN(invalid_argument, kInvalidArgument)
LOOM_ERROR_FN(not_found, kNotFound)
LOOM_ERROR_FN(out_of_range, kOutOfRange)
LOOM_ERROR_FN(data_loss, kDataLoss)
LOOM_ERROR_FN(unimplemented, kUnimplemented)
LOOM_ERROR_FN(failed_precondition, kFailedPrecondition)
LOOM_ERROR_FN(resource_exhausted, kResourceExhausted)
LOOM_ERROR_FN(unavailable, kUnavailable)
LOOM_ERROR_FN(cancelled, kCancelled)
LOOM_ERROR_FN(internal_error, kInternal)
#undef LOOM_ERROR_FN

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const& {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  Status status() && { return ok() ? Status() : std::move(std::get<Status>(v_)); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  Result& with_context(std::string context) & {
    if (!ok()) std::get<Status>(v_).with_context(std::move(context));
    return *this;
  }
  Result&& with_context(std::string context) && {
    if (!ok()) std::get<Status>(v_).with_context(std::move(context));
    return std::move(*this);
  }

 private:
  std::variant<T, Status> v_;
};

namespace detail {
inline Status to_status(const Status& s) { return s; }
inline Status to_status(Status&& s) { return std::move(s); }
template <typename T>
Status to_status(Result<T>&& r) { return std::move(r).status(); }
}  // namespace detail

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)

#define LOOM_RETURN_IF_ERROR(expr)                              \
  do {                                                          \
    ::loom::Status loom_status_ = ::loom::detail::to_status(expr); \
    if (!loom_status_.ok()) return loom_status_;                \
  } while (0)

#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return std::move(tmp).status();   \
  lhs = std::move(tmp).value()

#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
  LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_CONCAT(loom_result_, __LINE__), lhs, expr)

}  // namespace loom
