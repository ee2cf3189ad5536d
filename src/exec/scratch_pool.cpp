// SPDX-License-Identifier: Apache-2.0
// The per-backend scratch pool (see scratch_pool.hpp).
#include "exec/scratch_pool.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <mutex>

#include "common/env.hpp"
#include "common/log.hpp"
#include "core/check.hpp"

namespace chimera::detail {

ScratchPool::ScratchPool(Backend& backend, std::size_t limitBytes) : backend_(backend), limit_(limitBytes) {}

ScratchPool::~ScratchPool() {
  trim();
  if (!sizeOf_.empty()) {
    CHIMERA_LOG_WARN("exec", "scratch pool destroyed with {} blocks ({} bytes) still in use", sizeOf_.size(), held_);
    for (const auto& [ptr, size] : sizeOf_) backend_.deallocate(ptr);
  }
}

Status ScratchPool::acquire(std::size_t bytes, void** out) {
  CHIMERA_CHECK_ARG(out != nullptr, "scratch: null output pointer");
  CHIMERA_CHECK_ARG(bytes > 0, "scratch: 0 bytes requested");
  CHIMERA_CHECK_ARG(bytes <= SIZE_MAX - kScratchGranularity, "scratch: {} bytes requested", bytes);
  const std::size_t size = (bytes + kScratchGranularity - 1) / kScratchGranularity * kScratchGranularity;
  if (const auto it = free_.lower_bound(size); it != free_.end() && it->first / 2 <= size) {
    *out = it->second;
    freeBytes_ -= it->first;
    free_.erase(it);
    return Status::ok();
  }
  while (size > limit_ - std::min(limit_, held_) && !free_.empty()) freeLargest();
  if (size > limit_ - std::min(limit_, held_)) {
    return Status::backendError(
        fmt::format("scratch limit of {} bytes (CHIMERA_SCRATCH_LIMIT_BYTES) reached: {} bytes in use, {} more "
                    "requested; raise the limit or lower the prepared-plan limit",
                    limit_, inUseBytes(), size));
  }
  void* ptr = nullptr;
  Status status = backend_.allocate(size, &ptr);
  if (!status.isOk() && !free_.empty()) {  // out of device memory: give the free blocks back and retry once
    trim();
    status = backend_.allocate(size, &ptr);
  }
  CHIMERA_RETURN_IF_ERROR(status);
  sizeOf_.emplace(ptr, size);
  held_ += size;
  ++allocations_;
  *out = ptr;
  return Status::ok();
}

void ScratchPool::release(void* ptr) {
  if (ptr == nullptr) return;
  const auto it = sizeOf_.find(ptr);
  if (it == sizeOf_.end()) {
    CHIMERA_LOG_WARN("exec", "scratch pool: release of {} it never handed out", ptr);
    return;
  }
  free_.emplace(it->second, ptr);
  freeBytes_ += it->second;
  if (held_ > limit_) freeLargest();
}

void ScratchPool::freeLargest() {
  const auto last = std::prev(free_.end());
  backend_.deallocate(last->second);
  held_ -= last->first;
  freeBytes_ -= last->first;
  sizeOf_.erase(last->second);
  free_.erase(last);
}

void ScratchPool::setLimit(std::size_t limitBytes) {
  limit_ = limitBytes;
  while (held_ > limit_ && !free_.empty()) freeLargest();
}

void ScratchPool::trim() {
  while (!free_.empty()) freeLargest();
}

Status scratchLimitFromEnv(std::size_t& out) { return readEnvCount("CHIMERA_SCRATCH_LIMIT_BYTES", SIZE_MAX, out); }

Status scratchPoolFor(Backend& backend, std::shared_ptr<ScratchPool>& out) {
  static std::mutex mutex;
  static std::unordered_map<const Backend*, std::weak_ptr<ScratchPool>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto existing = pools[&backend].lock()) {
    out = std::move(existing);
    return Status::ok();
  }
  std::size_t limit = SIZE_MAX;
  CHIMERA_RETURN_IF_ERROR(scratchLimitFromEnv(limit));
  out = std::make_shared<ScratchPool>(backend, limit);
  pools[&backend] = out;
  return Status::ok();
}

}  // namespace chimera::detail
