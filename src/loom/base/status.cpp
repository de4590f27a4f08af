// Status implementation: message assembly with the context trail.
#include "loom/base/status.h"

namespace loom {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kDataLoss: return "corrupt data";
    case StatusCode::kUnimplemented: return "unsupported";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kDeadlineExceeded: return "deadline exceeded";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_ = std::make_unique<State>(State{code, std::move(message), {}});
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (!state_) return "ok";
  std::string out;
  for (auto it = state_->context.rbegin(); it != state_->context.rend(); ++it) {
    out += *it;
    out += ": ";
  }
  out += state_->message;
  return out;
}

Status& Status::with_context(std::string context) & {
  if (state_) state_->context.push_back(std::move(context));
  return *this;
}

Status&& Status::with_context(std::string context) && {
  if (state_) state_->context.push_back(std::move(context));
  return std::move(*this);
}

}  // namespace loom
