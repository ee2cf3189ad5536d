// SPDX-License-Identifier: Apache-2.0
// Persistent, grow-only host scratch for the MPI backend's own algorithms.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace chimera::detail {

/// Host scratch that only grows. Memory is allocated and touched (zeroed) once when it
/// grows, never on the hot path: allocating and page-faulting per call costs ~10x the
/// collective itself on an oversubscribed host. Not thread-safe (one per backend).
class ScratchBuffer {
 public:
  ScratchBuffer() = default;
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;
  ~ScratchBuffer() { std::free(data_); }

  /// At least `bytes` bytes, 64-byte aligned; nullptr when the allocation fails. Contents
  /// are unspecified; the pointer stays valid until a call with a larger size.
  void* get(std::size_t bytes) {
    if (bytes <= capacity_) return data_;
    if (bytes > kMaxBytes) return nullptr;  // rounding up would overflow
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* grown = std::aligned_alloc(kAlignment, rounded);
    if (grown == nullptr) return nullptr;
    std::memset(grown, 0, rounded);  // fault the pages in now, not inside the collective
    std::free(data_);
    data_ = grown;
    capacity_ = rounded;
    return data_;
  }

  /// Hands the buffer to a process-wide list of abandoned buffers instead of freeing it: after
  /// a Timeout, a late peer may still write into it. The list keeps it reachable (not a leak)
  /// until the process exits.
  void abandon() {
    if (data_ != nullptr) abandonedBuffers().push_back(data_);
    data_ = nullptr;
    capacity_ = 0;
  }

  /// Bytes currently held.
  std::size_t capacity() const { return capacity_; }

 private:
  static std::vector<void*>& abandonedBuffers() {
    static auto* buffers = new std::vector<void*>();  // never destroyed: outlives every backend
    return *buffers;
  }

  static constexpr std::size_t kAlignment = 64;
  static constexpr std::size_t kMaxBytes = static_cast<std::size_t>(-1) - kAlignment;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace chimera::detail
