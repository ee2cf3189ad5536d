// SPDX-License-Identifier: Apache-2.0
// Live-handle registry and exception guard of the C API. A handle the C API hands out is not
// the address of its object but a number: a generation that is never reused (a 64-bit counter
// of the handles made so far) and the handle's kind. Every entry point looks its handles up
// here (never dereferencing what the caller passed), so a destroyed, foreign, doubly destroyed
// or wrong-kind handle is an InvalidArgument instead of undefined behaviour, and a handle made
// after another was destroyed never answers to the old one's value, wherever its object lives.
// A handle that owns others (a communicator its sessions and routed exchanges) cannot be
// destroyed while they live. The guard turns any C++ exception into a result code, so none
// crosses the C boundary.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "capi/capi_handles.hpp"
#include "chimera/status.hpp"
#include "core/check.hpp"

namespace chimera::detail {

/// Registers `object` (the registry does not own it) as a live handle of `kind`, owned by the
/// live handle `owner` (0: none); returns the handle's value (thread-safe).
std::uintptr_t registerHandle(HandleKind kind, void* object, std::uintptr_t owner);
/// The object of the live handle `handle` of `kind`; InvalidArgument naming the problem (null,
/// another kind, never made or already destroyed) otherwise.
[[nodiscard]] Status lookupHandle(std::uintptr_t handle, HandleKind kind, void*& object);
/// Unregisters the live handle `handle` of `kind` and gives its object back for the caller to
/// delete; InvalidArgument as lookupHandle, or while handles it owns are live (named by kind
/// and count), and then nothing is unregistered.
[[nodiscard]] Status releaseHandle(std::uintptr_t handle, HandleKind kind, void*& object);

/// The object of a handle of the C API (Object::kKind says which kind).
template <typename Object, typename Handle>
[[nodiscard]] Status lookup(Handle handle, Object*& out) {
  void* object = nullptr;
  CHIMERA_RETURN_IF_ERROR(lookupHandle(reinterpret_cast<std::uintptr_t>(handle), Object::kKind, object));
  out = static_cast<Object*>(object);
  return Status::ok();
}

/// Registers `object`, owned from now on by the registry's handle, and returns the handle.
template <typename Handle, typename Object>
Handle publish(std::unique_ptr<Object> object, std::uintptr_t owner = 0) {
  const std::uintptr_t value = registerHandle(Object::kKind, object.get(), owner);
  object.release();
  return reinterpret_cast<Handle>(value);
}

/// The value of a handle, to name it as the owner of another.
template <typename Handle>
std::uintptr_t handleValue(Handle handle) {
  return reinterpret_cast<std::uintptr_t>(handle);
}

/// Destroys the object of a live handle (see releaseHandle); NULL is a no-op.
template <typename Object, typename Handle>
[[nodiscard]] Status destroy(Handle handle) {
  if (handle == nullptr) return Status::ok();
  void* object = nullptr;
  CHIMERA_RETURN_IF_ERROR(releaseHandle(reinterpret_cast<std::uintptr_t>(handle), Object::kKind, object));
  delete static_cast<Object*>(object);
  return Status::ok();
}

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
