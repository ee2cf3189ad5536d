// SPDX-License-Identifier: Apache-2.0
// Implements the ptrace permission of same-host peer reads (Yama scope, PR_SET_PTRACER).
#include "mpi/ptrace_permission.hpp"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <system_error>

namespace chimera::detail {
namespace {

// The parent of `pid` from /proc/<pid>/stat ("pid (comm) state ppid ..."; comm may hold spaces
// and parentheses, so the fields are read after the last ')'); 0 when unreadable.
std::int64_t parentOf(std::int64_t pid) {
  std::ifstream file(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(file, line)) return 0;
  const std::size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string state;
  std::int64_t parent = 0;
  fields >> state >> parent;
  return fields ? parent : 0;
}

// The process-wide declaration: the tracer declared and how many backends hold it.
struct Declared {
  std::mutex mutex;
  std::int64_t tracer = 0;
  int holders = 0;
};
Declared& declared() {
  static Declared state;
  return state;
}

bool setPtracer(std::int64_t tracer) {
#ifdef PR_SET_PTRACER
  return prctl(PR_SET_PTRACER, static_cast<unsigned long>(tracer), 0, 0, 0) == 0;
#else
  (void)tracer;
  errno = ENOSYS;
  return false;
#endif
}

}  // namespace

int yamaPtraceScope(const char* path) {
  std::ifstream file(path);
  int scope = -1;
  if (!(file >> scope) || scope < 0) return -1;
  return scope;
}

Ancestry ownAncestry() {
  Ancestry out{};
  std::int64_t pid = static_cast<std::int64_t>(getppid());
  for (std::size_t i = 0; i < out.size() && pid > 1; ++i) {
    out[i] = pid;
    pid = parentOf(pid);
  }
  return out;
}

PtraceGrant decidePtraceGrant(int scope, const Ancestry& mine, std::span<const Ancestry> refused) {
  if (refused.empty()) return {0, "every same-host peer reads this rank without a declaration"};
  if (scope < 1)
    return {0, fmt::format("Yama scope {}: the classic ptrace rule decides, a declaration would not change it",
                           scope < 0 ? std::string("absent") : std::to_string(scope))};
  if (scope >= 2)
    return {0, fmt::format("Yama scope {}: only CAP_SYS_PTRACE (scope 2) or nobody (scope 3) may read; "
                           "PR_SET_PTRACER cannot help, the peers pack",
                           scope)};
  for (const std::int64_t candidate : mine) {
    if (candidate <= 1) break;
    const bool common = std::all_of(refused.begin(), refused.end(), [&](const Ancestry& peer) {
      return std::find(peer.begin(), peer.end(), candidate) != peer.end();
    });
    if (common)
      return {candidate, fmt::format("Yama scope 1: declared pid {}, the nearest ancestor shared with the {} peer(s) "
                                     "that could not read this rank (their launcher)",
                                     candidate, refused.size())};
  }
  return {0, "Yama scope 1: no ancestor below init shared with the peers that could not read this rank; they pack"};
}

PtracerDeclaration& PtracerDeclaration::operator=(PtracerDeclaration&& other) noexcept {
  if (this != &other) {
    release();
    tracer_ = other.tracer_;
    other.tracer_ = 0;
  }
  return *this;
}

Status PtracerDeclaration::declare(std::int64_t tracer) {
  if (tracer <= 0) return Status::invalidArgument(fmt::format("PR_SET_PTRACER of pid {}", tracer));
  if (tracer_ == tracer) return Status::ok();
  release();
  Declared& state = declared();
  const std::lock_guard<std::mutex> lock(state.mutex);
  if (state.holders > 0 && state.tracer != tracer)
    return Status::backendError(fmt::format(
        "another backend of this process declared pid {} as its ptracer; one tracer per process, so pid {} is not "
        "declared (the peers that need it pack)",
        state.tracer, tracer));
  if (state.holders == 0 && !setPtracer(tracer))
    return Status::backendError(fmt::format("prctl(PR_SET_PTRACER, {}): {}", tracer,
                                            std::error_code(errno, std::generic_category()).message()));
  state.tracer = tracer;
  ++state.holders;
  tracer_ = tracer;
  return Status::ok();
}

void PtracerDeclaration::release() {
  if (tracer_ == 0) return;
  tracer_ = 0;
  Declared& state = declared();
  const std::lock_guard<std::mutex> lock(state.mutex);
  if (--state.holders > 0) return;
  (void)setPtracer(0);  // clears the declaration
  state.tracer = 0;
}

std::int64_t declaredPtracer() {
  Declared& state = declared();
  const std::lock_guard<std::mutex> lock(state.mutex);
  return state.tracer;
}

}  // namespace chimera::detail
