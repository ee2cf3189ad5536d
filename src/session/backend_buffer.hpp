// SPDX-License-Identifier: Apache-2.0
// A grow-only buffer in a backend's memory space, for the Session's staging and agreement.
#pragma once

#include <cstddef>

#include "chimera/backend.hpp"
#include "core/check.hpp"

namespace chimera::detail {

/// Memory from `Backend::allocate` that only grows: reserved once, reused by every window,
/// freed with the owner. Not thread-safe.
class BackendBuffer {
 public:
  explicit BackendBuffer(Backend& backend) : backend_(backend) {}
  ~BackendBuffer() { backend_.deallocate(data_); }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  /// Makes the buffer at least `bytes` long (contents are not kept when it grows).
  [[nodiscard]] Status reserve(std::size_t bytes) {
    if (bytes <= bytes_) return Status::ok();
    backend_.deallocate(data_);
    data_ = nullptr;
    bytes_ = 0;
    CHIMERA_RETURN_IF_ERROR(backend_.allocate(bytes, &data_));
    bytes_ = bytes;
    return Status::ok();
  }
  /// The memory (nullptr before the first reserve).
  void* data() const { return data_; }

 private:
  Backend& backend_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace chimera::detail
