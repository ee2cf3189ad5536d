// SPDX-License-Identifier: Apache-2.0
// Implements the MPI backend's host buffers (mapped pages for large ones).
#include "mpi/host_memory.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cstdlib>

namespace chimera::detail {

HostMemory::~HostMemory() {
  for (const auto& [address, length] : mapped_) ::munmap(address, length);
}

Status HostMemory::allocate(std::size_t bytes, void** out) {
  if (bytes >= kMappedBytes) {
    void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return Status::backendError(fmt::format("allocate: cannot map {} bytes", bytes));
    mapped_.emplace(memory, bytes);
    *out = memory;
    return Status::ok();
  }
  constexpr std::size_t kAlignment = 64;
  void* memory = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (memory == nullptr) return Status::backendError(fmt::format("allocate: out of host memory for {} bytes", bytes));
  *out = memory;
  return Status::ok();
}

void HostMemory::release(void* ptr) {
  if (ptr == nullptr) return;
  if (const auto it = mapped_.find(ptr); it != mapped_.end()) {
    ::munmap(it->first, it->second);
    mapped_.erase(it);
    return;
  }
  std::free(ptr);
}

}  // namespace chimera::detail
