// SPDX-License-Identifier: Apache-2.0
// Implements the C API's live-handle registry and exception guard.
#include "capi/capi_registry.hpp"

#include <fmt/format.h>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/check.hpp"

namespace chimera::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_set<const chimeraComm*> comms;
  std::unordered_map<const chimeraSession*, const chimeraComm*> sessions;
};

Registry& registry() {
  static Registry* instance = new Registry();  // never destroyed: usable from atexit handlers
  return *instance;
}

Status commStatus(const Registry& r, const chimeraComm* comm) {
  if (comm == nullptr) return Status::invalidArgument("null communicator");
  if (r.comms.count(comm) == 0)
    return Status::invalidArgument(fmt::format(
        "communicator {} is not live (already destroyed, or not made by chimeraCommInit*)", fmt::ptr(comm)));
  return Status::ok();
}

Status sessionStatus(const Registry& r, const chimeraSession* session) {
  if (session == nullptr) return Status::invalidArgument("null session");
  if (r.sessions.count(session) == 0)
    return Status::invalidArgument(
        fmt::format("session {} is not live (already ended, or not made by chimeraSessionBegin)", fmt::ptr(session)));
  return Status::ok();
}

}  // namespace

void registerComm(chimeraComm* comm) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.comms.insert(comm);
}

void registerSession(chimeraSession* session) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.sessions.emplace(session, session->comm);
}

Status lookupComm(const chimeraComm* comm) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  return commStatus(r, comm);
}

Status lookupSession(const chimeraSession* session) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  return sessionStatus(r, session);
}

Status releaseComm(chimeraComm* comm) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  CHIMERA_RETURN_IF_ERROR(commStatus(r, comm));
  std::size_t live = 0;
  for (const auto& [session, owner] : r.sessions) live += owner == comm ? 1 : 0;
  if (live > 0)
    return Status::invalidArgument(fmt::format(
        "communicator {} still has {} live session(s): end them with chimeraSessionEnd first", fmt::ptr(comm), live));
  r.comms.erase(comm);
  return Status::ok();
}

Status releaseSession(chimeraSession* session) {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  CHIMERA_RETURN_IF_ERROR(sessionStatus(r, session));
  r.sessions.erase(session);
  return Status::ok();
}

}  // namespace chimera::detail
