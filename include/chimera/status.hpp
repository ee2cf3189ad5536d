// SPDX-License-Identifier: Apache-2.0
// Status (stable API): the one error model of the library. Every fallible call returns a
// Status with a code and a message naming the problem; nothing throws across the API.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace chimera {

/// Outcome category of a fallible call. No exception crosses the public API; every
/// fallible call returns a `Status` carrying one of these codes and a message.
enum class StatusCode {
  Ok = 0,           ///< success
  InvalidArgument,  ///< the caller passed something malformed (bad count, null buffer, unknown axis, ...)
  Unsupported,      ///< well-formed but not supported here (dtype/op pair, backend feature); callers may fall back
  Mismatch,         ///< ranks disagree (counts, plans, signatures); reported on every rank
  BackendError,     ///< the transport (MPI, NCCL, CUDA) reported a failure
  Timeout,          ///< an operation stopped making progress and was aborted
  Internal,         ///< a bug in chimera; please report
};

/// Name of a status code ("ok", "invalid argument", ...).
std::string_view statusCodeName(StatusCode code);

/// Result of a fallible call: a code plus a human-readable message with context.
class [[nodiscard]] Status {
 public:
  /// Success.
  Status() = default;
  /// A status with `code` and `message`; `message` should name the problem and its values.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  /// Success.
  static Status ok() { return {}; }
  /// Shorthands for the error categories.
  static Status invalidArgument(std::string message) { return {StatusCode::InvalidArgument, std::move(message)}; }
  static Status unsupported(std::string message) { return {StatusCode::Unsupported, std::move(message)}; }
  static Status mismatch(std::string message) { return {StatusCode::Mismatch, std::move(message)}; }
  static Status backendError(std::string message) { return {StatusCode::BackendError, std::move(message)}; }
  static Status timeout(std::string message) { return {StatusCode::Timeout, std::move(message)}; }
  static Status internal(std::string message) { return {StatusCode::Internal, std::move(message)}; }

  /// True on success.
  bool isOk() const { return code_ == StatusCode::Ok; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  /// The message alone (empty on success).
  const std::string& message() const { return message_; }
  /// "ok" or "<code name>: <message>".
  std::string toString() const;

 private:
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

}  // namespace chimera
