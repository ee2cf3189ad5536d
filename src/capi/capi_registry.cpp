// SPDX-License-Identifier: Apache-2.0
// Implements the C API's live-handle registry and exception guard.
#include "capi/capi_registry.hpp"

#include <fmt/format.h>

#include <array>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/check.hpp"

namespace chimera::detail {
namespace {

constexpr unsigned kKindBits = 3;  // a handle's value: generation << kKindBits | kind
constexpr std::uintptr_t kKindMask = (std::uintptr_t{1} << kKindBits) - 1;
static_assert(static_cast<unsigned>(HandleKind::RoutedHandle) <= kKindMask, "every kind fits in the kind bits");

struct Entry {
  HandleKind kind;
  void* object;
  std::uintptr_t owner;
};

struct Registry {
  std::mutex mutex;
  std::uintptr_t generation = 0;  // of the last handle made
  std::unordered_map<std::uintptr_t, Entry> live;
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: usable from atexit handlers
  return *instance;
}

struct KindNames {
  const char* name;
  const char* maker;
  const char* gone;  // what its destruction is called
};

KindNames names(HandleKind kind) {
  switch (kind) {
    case HandleKind::Comm: return {"communicator", "chimeraCommInit*", "destroyed"};
    case HandleKind::Session: return {"session", "chimeraSessionBegin*", "ended"};
    case HandleKind::RoutedExchange: return {"routed exchange", "chimeraRoutedExchangeCreate", "destroyed"};
    case HandleKind::RoutedHandle: return {"routed dispatch handle", "chimeraRoutedDispatch", "destroyed"};
  }
  return {"handle", "chimera", "destroyed"};
}

Status find(const Registry& r, std::uintptr_t handle, HandleKind kind, const Entry*& out) {
  const KindNames want = names(kind);
  if (handle == 0) return Status::invalidArgument(fmt::format("null {}", want.name));
  const auto it = r.live.find(handle);
  if (it == r.live.end()) {
    return Status::invalidArgument(
        fmt::format("{} {:#x} is not live (already {}, or not made by {})", want.name, handle, want.gone, want.maker));
  }
  if (it->second.kind != kind)
    return Status::invalidArgument(
        fmt::format("handle {:#x} is a {}, not a {}", handle, names(it->second.kind).name, want.name));
  out = &it->second;
  return Status::ok();
}

}  // namespace

std::uintptr_t registerHandle(HandleKind kind, void* object, std::uintptr_t owner) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  const std::uintptr_t value = (++r.generation << kKindBits) | static_cast<std::uintptr_t>(kind);
  CHIMERA_ASSERT(r.generation < (~std::uintptr_t{0} >> kKindBits));
  r.live.emplace(value, Entry{kind, object, owner});
  return value;
}

Status lookupHandle(std::uintptr_t handle, HandleKind kind, void*& object) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  const Entry* entry = nullptr;
  CHIMERA_RETURN_IF_ERROR(find(r, handle, kind, entry));
  object = entry->object;
  return Status::ok();
}

Status releaseHandle(std::uintptr_t handle, HandleKind kind, void*& object) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  const Entry* entry = nullptr;
  CHIMERA_RETURN_IF_ERROR(find(r, handle, kind, entry));
  std::array<std::size_t, kKindMask + 1> owned{};
  for (const auto& [value, other] : r.live) owned[static_cast<std::size_t>(other.kind)] += other.owner == handle;
  std::string held;
  for (std::size_t k = 0; k < owned.size(); ++k) {
    if (owned[k] > 0)
      held +=
          fmt::format("{}{} live {}(s)", held.empty() ? "" : " and ", owned[k], names(static_cast<HandleKind>(k)).name);
  }
  if (!held.empty())
    return Status::invalidArgument(
        fmt::format("{} {:#x} still has {}: destroy them first (chimeraSessionEnd, chimeraRoutedExchangeDestroy)",
                    names(kind).name, handle, held));
  object = entry->object;
  r.live.erase(handle);
  return Status::ok();
}

}  // namespace chimera::detail
