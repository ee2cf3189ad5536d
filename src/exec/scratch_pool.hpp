// SPDX-License-Identifier: Apache-2.0
// One pool of scratch memory per backend, shared by every prepared plan of every executor on
// it, with a byte cap: plans used to hold their own scratch (up to 256 of them), which on a
// 16 GB card is an out-of-memory risk. Freed plans return their blocks to the pool, the next
// plan reuses them; the cap bounds what the pool holds from the backend.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <unordered_map>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Byte granularity of pool blocks (cudaMalloc's alignment).
inline constexpr std::size_t kScratchGranularity = 256;

/// Scratch memory from one backend, reused across plans. Not thread-safe (like Executor).
/// Allocation decisions depend only on the sequence of acquire/release calls, which every
/// rank makes alike (SPMD), so all ranks hit the cap at the same call.
class ScratchPool {
 public:
  /// A pool drawing from `backend` (not owned; must outlive the pool), holding at most
  /// `limitBytes` from it.
  ScratchPool(Backend& backend, std::size_t limitBytes);
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  /// A block of at least `bytes` (> 0): a free block of the pool no larger than twice the
  /// request (rounded to kScratchGranularity) when there is one, else a new one from the
  /// backend, after returning free blocks to the backend when the new one would pass the cap.
  /// BackendError naming the cap, the bytes in use and the request when it cannot fit.
  [[nodiscard]] Status acquire(std::size_t bytes, void** out);
  /// Returns a block from acquire to the pool (kept for reuse). nullptr is a no-op.
  void release(void* ptr);
  /// Changes the cap and returns free blocks beyond it to the backend at once.
  void setLimit(std::size_t limitBytes);
  /// Returns every free block to the backend.
  void trim();

  /// The cap in bytes.
  std::size_t limit() const { return limit_; }
  /// Bytes held from the backend (in use + free).
  std::size_t heldBytes() const { return held_; }
  /// Bytes of blocks handed out and not released.
  std::size_t inUseBytes() const { return held_ - freeBytes_; }
  /// Blocks allocated from the backend so far (a measure of reuse).
  std::size_t backendAllocations() const { return allocations_; }

 private:
  void freeLargest();

  Backend& backend_;
  std::size_t limit_;
  std::size_t held_ = 0;
  std::size_t freeBytes_ = 0;
  std::size_t allocations_ = 0;
  std::multimap<std::size_t, void*> free_;         // size -> block
  std::unordered_map<void*, std::size_t> sizeOf_;  // every block held, its size
};

/// The cap of CHIMERA_SCRATCH_LIMIT_BYTES (a positive decimal number of bytes), or no cap
/// (SIZE_MAX) when unset. InvalidArgument naming the value when malformed.
[[nodiscard]] Status scratchLimitFromEnv(std::size_t& out);

/// The pool of `backend`, shared by all its executors: made on first request (with the cap
/// from the environment), kept while one holder remains.
[[nodiscard]] Status scratchPoolFor(Backend& backend, std::shared_ptr<ScratchPool>& out);

}  // namespace chimera::detail
