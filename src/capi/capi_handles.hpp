// SPDX-License-Identifier: Apache-2.0
// The objects behind the C API's opaque handles (a handle is a registry number, not their
// address: capi_registry.hpp), and the Status -> chimeraResult_t bridge.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "chimera/backend.hpp"
#include "chimera/chimera.h"
#include "chimera/executor.hpp"
#include "chimera/session.hpp"

namespace chimera::detail {

/// The kinds of handle the C API hands out (capi_registry.hpp), each with its object below.
enum class HandleKind : std::uint8_t { Comm = 1, Session = 2, RoutedExchange = 3, RoutedHandle = 4 };

/// The object of a chimeraComm_t.
struct CommObject {
  static constexpr HandleKind kKind = HandleKind::Comm;
  chimera::Mesh mesh;
  std::unique_ptr<chimera::Backend> backend;
  std::unique_ptr<chimera::Executor> executor;  ///< for chimeraRedistribute, made on first use
  /// The stream of chimeraCommSetStream: the communicator's plain collectives, send/recv and
  /// chimeraRedistribute are ordered on it, chimeraCommSynchronize waits for it, and a session
  /// begun without a stream of its own takes it. The backend keeps no stream: each call passes it.
  void* stream = nullptr;
};

/// The object of a chimeraSession_t: its communicator outlives it (the registry refuses to
/// destroy a communicator with live sessions).
struct SessionObject {
  static constexpr HandleKind kKind = HandleKind::Session;
  CommObject* comm = nullptr;
  std::unique_ptr<chimera::Session> session;
};

}  // namespace chimera::detail

namespace chimera::detail {

/// Stores `status`'s text as this thread's last error (when it failed) and maps its code.
chimeraResult_t toResult(const Status& status);

/// This thread's last error message ("" before any failure).
const char* lastErrorText();

/// The integer a C enum argument holds, read from its bytes: a C caller may pass any int, and
/// loading an out-of-range value as the C++ enum type would be undefined behaviour.
template <typename CEnum>
long long cEnumValue(const CEnum& value) {
  std::underlying_type_t<CEnum> raw;
  static_assert(sizeof(raw) == sizeof(CEnum));
  std::memcpy(&raw, &value, sizeof(raw));
  return static_cast<long long>(raw);
}

/// The element type of a C datatype; InvalidArgument naming the value when out of range.
[[nodiscard]] Status fromCDataType(const chimeraDataType_t& datatype, DataType& out);

}  // namespace chimera::detail
