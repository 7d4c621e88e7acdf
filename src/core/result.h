// Status and Result<T>: recoverable failures carry a one-line message that names the thing
// ("[safetensors] tensor 'x': data offset past end of file").
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace qwen35::core {

class Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }
  // Prefixes context: "[layer] what: " + message.
  Status with_context(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + message_);
  }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status error(std::string message) { return Status::error(std::move(message)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) std::abort();  // a Result from an ok Status has no value
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  const std::string& message() const { return status().message(); }
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

inline const Status& status_of(const Status& s) { return s; }
template <typename T>
const Status& status_of(const Result<T>& r) {
  return r.status();
}

}  // namespace qwen35::core

// Early return of a failed Status / Result.
#define QWEN35_RETURN_IF_ERROR(expr)                          \
  do {                                                        \
    auto _st = (expr);                                        \
    if (!_st.ok()) return ::qwen35::core::status_of(_st);     \
  } while (0)

#define QWEN35_CONCAT_INNER(a, b) a##b
#define QWEN35_CONCAT(a, b) QWEN35_CONCAT_INNER(a, b)
// QWEN35_ASSIGN_OR_RETURN(auto x, f()) — on failure returns the error to the caller.
#define QWEN35_ASSIGN_OR_RETURN(decl, expr) \
  QWEN35_ASSIGN_OR_RETURN_IMPL(QWEN35_CONCAT(_res_, __LINE__), decl, expr)
#define QWEN35_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  decl = std::move(tmp).value()
