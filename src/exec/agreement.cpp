// SPDX-License-Identifier: Apache-2.0
// Implements the agreement's MIN reduction on a Backend's own collectives.
#include "exec/agreement.hpp"

#include <cstring>

#include "core/check.hpp"

namespace chimera::detail {

GroupMin BackendReduction::over(std::span<const AxisSet> groups, Stream stream) {
  return [this, groups, stream](std::span<std::int64_t> words) { return minOver(words, groups, stream); };
}

Status BackendReduction::minOver(std::span<std::int64_t> words, std::span<const AxisSet> groups, Stream stream) {
  if (groups.empty() || words.empty()) return Status::ok();
  const std::size_t bytes = words.size() * sizeof(std::int64_t);
  if (bytes > bytes_) {
    backend_.deallocate(device_);
    backend_.deallocateHost(host_);
    device_ = nullptr;
    host_ = nullptr;
    bytes_ = 0;
    CHIMERA_RETURN_IF_ERROR(backend_.allocate(bytes, &device_));
    CHIMERA_RETURN_IF_ERROR(backend_.allocateHost(bytes, &host_));
    bytes_ = bytes;
  }
  std::memcpy(host_, words.data(), bytes);
  CHIMERA_RETURN_IF_ERROR(backend_.copy(device_, host_, bytes, stream));
  for (AxisSet group : groups) {
    CHIMERA_RETURN_IF_ERROR(
        backend_.allReduce(device_, device_, words.size(), DataType::I64, ReduceOp::Min, group, stream));
    ++collectives_;
  }
  CHIMERA_RETURN_IF_ERROR(backend_.copy(host_, device_, bytes, stream));
  CHIMERA_RETURN_IF_ERROR(backend_.synchronize(stream));
  std::memcpy(words.data(), host_, bytes);
  return Status::ok();
}

}  // namespace chimera::detail
