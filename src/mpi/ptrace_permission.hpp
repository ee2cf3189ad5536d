// SPDX-License-Identifier: Apache-2.0
// The permission a rank gives its same-host peers to read its memory (private). Linux lets a
// process read another's memory (process_vm_readv) under the ptrace rules; Yama's
// /proc/sys/kernel/yama/ptrace_scope narrows them: scope 0 (or no Yama) is the classic rule
// (same user, no extra step), scope 1 admits only descendants and the tracer a process declared
// with prctl(PR_SET_PTRACER) and that tracer's descendants, scope 2 only CAP_SYS_PTRACE, scope 3
// nobody. chimera declares a tracer only under scope 1, only when a peer could not read it
// without one, and then the nearest common ancestor of this rank and those peers (the launcher
// that started them: mpirun's daemon, slurmstepd), never PR_SET_PTRACER_ANY, which would admit
// every process of the user.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Where the kernel says Yama's ptrace scope.
inline constexpr const char* kYamaScopePath = "/proc/sys/kernel/yama/ptrace_scope";

/// Yama's ptrace scope read from `path` (0-3), or -1 when the file is absent or unreadable
/// (no Yama: the classic ptrace rule).
int yamaPtraceScope(const char* path = kYamaScopePath);

/// How many ancestors of a process are looked at.
inline constexpr std::size_t kAncestry = 16;
/// The ancestors of one process, nearest first (its parent, the parent's parent, ...), 0 after
/// the last; init (pid 1) and pid 0 are left out, since declaring init would admit every process
/// of the PID namespace.
using Ancestry = std::array<std::int64_t, kAncestry>;

/// The ancestors of this process, read from /proc/<pid>/stat.
Ancestry ownAncestry();

/// What this rank declares so that its same-host peers can read it, and why.
struct PtraceGrant {
  /// The pid declared with PR_SET_PTRACER (it and its descendants may read); 0: declare nothing.
  std::int64_t tracer = 0;
  std::string reason;
};

/// The declaration for Yama scope `scope` (yamaPtraceScope) when the peers whose ancestries are
/// `refused` could not read this rank (whose ancestry is `mine`): nothing unless scope is 1 and
/// some peer was refused; under scope 1 the nearest ancestor of this rank that is an ancestor of
/// every refused peer too, or nothing when there is none (those peers then pack).
PtraceGrant decidePtraceGrant(int scope, const Ancestry& mine, std::span<const Ancestry> refused);

/// A process-wide PR_SET_PTRACER declaration held on behalf of one backend: the kernel keeps one
/// declared tracer per process, so backends of one process share it (counted), and the last one
/// to let go clears it. Movable, not copyable.
class PtracerDeclaration {
 public:
  PtracerDeclaration() = default;
  PtracerDeclaration(PtracerDeclaration&& other) noexcept : tracer_(other.tracer_) { other.tracer_ = 0; }
  PtracerDeclaration& operator=(PtracerDeclaration&& other) noexcept;
  PtracerDeclaration(const PtracerDeclaration&) = delete;
  PtracerDeclaration& operator=(const PtracerDeclaration&) = delete;
  ~PtracerDeclaration() { release(); }

  /// Declares `tracer` (> 0) for this process, or joins the declaration another backend made of
  /// the same tracer. BackendError when the kernel refuses, or when another backend of this
  /// process holds a different tracer (one per process).
  [[nodiscard]] Status declare(std::int64_t tracer);
  /// Lets go of the declaration; the last holder clears it (PR_SET_PTRACER 0).
  void release();
  /// The tracer held, 0 when none.
  std::int64_t tracer() const { return tracer_; }

 private:
  std::int64_t tracer_ = 0;
};

/// The tracer chimera has declared for this process, 0 when none (prctl has no getter: this is
/// what tests observe before, during and after a backend).
std::int64_t declaredPtracer();

}  // namespace chimera::detail
