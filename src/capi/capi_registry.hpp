// SPDX-License-Identifier: Apache-2.0
// Live-handle registry and exception guard of the C API. Every communicator and session the
// C API hands out is registered until it is destroyed; every entry point looks its handles up
// by address (never dereferencing an unknown pointer), so a destroyed, foreign or doubly
// destroyed handle is an InvalidArgument instead of a use-after-free. A communicator with
// live sessions cannot be destroyed. The guard turns any C++ exception into a result code,
// so none crosses the C boundary.
#pragma once

#include <exception>
#include <new>

#include "capi/capi_handles.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Registers a communicator the C API created (thread-safe).
void registerComm(chimeraComm* comm);
/// Registers a session on its communicator (thread-safe).
void registerSession(chimeraSession* session);

/// Ok when `comm` is a live communicator; InvalidArgument naming the problem (null, never
/// created or already destroyed) otherwise.
[[nodiscard]] Status lookupComm(const chimeraComm* comm);
/// As lookupComm for a session (and its communicator).
[[nodiscard]] Status lookupSession(const chimeraSession* session);

/// Unregisters a live communicator, which the caller then deletes; InvalidArgument when it is
/// not live or still has live sessions (they are named by count).
[[nodiscard]] Status releaseComm(chimeraComm* comm);
/// Unregisters a live session, which the caller then deletes.
[[nodiscard]] Status releaseSession(chimeraSession* session);

/// Runs `body` (returning Status) and maps its result with toResult; an exception becomes
/// BackendError (std::bad_alloc: "out of memory") or Internal naming `function`.
template <typename Body>
chimeraResult_t guardedCall(const char* function, Body body) noexcept {
  try {
    return toResult(body());
  } catch (const std::bad_alloc&) {
    return toResult(Status::backendError(std::string(function) + ": out of memory"));
  } catch (const std::exception& e) {
    return toResult(Status::internal(std::string(function) + ": unexpected exception: " + e.what()));
  } catch (...) {
    return toResult(Status::internal(std::string(function) + ": unexpected exception"));
  }
}

}  // namespace chimera::detail
