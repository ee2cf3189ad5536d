// SPDX-License-Identifier: Apache-2.0
// Host buffers handed out by the MPI backend's allocate(): plans' scratch and benchmark
// buffers. Large ones are mapped pages of their own rather than malloc'd: glibc raises its
// mmap threshold after the first large free and then serves 16 MiB buffers from the heap,
// and on the development host that alone moved a fused scenario's speedup from ~2.0 to
// ~1.2-1.4 (docs/performance.md, "pp_sp depends on what ran before it").
#pragma once

#include <cstddef>
#include <unordered_map>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Allocates host memory: at least 64-byte aligned; from kMappedBytes up, page-aligned
/// anonymous mappings returned to the system on release. Not thread-safe (like Backend).
class HostMemory {
 public:
  /// Allocations of this size and above are mapped.
  static constexpr std::size_t kMappedBytes = std::size_t{1} << 20;

  HostMemory() = default;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  /// Unmaps whatever was not released.
  ~HostMemory();

  /// `bytes` > 0. BackendError when the system has no memory left.
  [[nodiscard]] Status allocate(std::size_t bytes, void** out);
  /// Releases memory from allocate; nullptr is a no-op.
  void release(void* ptr);

 private:
  std::unordered_map<void*, std::size_t> mapped_;  // address -> mapped length
};

}  // namespace chimera::detail
