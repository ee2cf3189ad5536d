// SPDX-License-Identifier: Apache-2.0
// Implements nccl-tests' in-place layouts: where an in-place call's input and result live.
#include "in_place.hpp"

#include <algorithm>
#include <cstddef>

namespace chimera::bench {

bool hasInPlaceForm(Collective collective) { return opKindInfo(collective).inPlace; }

std::optional<InPlaceLayout> inPlaceLayout(Collective collective, const BufferShape& shape, int groupIndex) {
  if (!hasInPlaceForm(collective)) return std::nullopt;
  const auto g = static_cast<std::size_t>(groupIndex);
  InPlaceLayout layout;
  layout.bufferCount = std::max(shape.sendCount, shape.recvCount);
  layout.sendCount = shape.sendCount;
  layout.recvCount = shape.recvCount;
  if (collective == Collective::ReduceScatter) layout.recvOffset = g * shape.recvCount;
  if (collective == Collective::AllGather) layout.sendOffset = g * shape.sendCount;
  return layout;
}

void* elementAt(void* buffer, DataType dtype, std::size_t offset) {
  return static_cast<std::byte*>(buffer) + offset * dataTypeSize(dtype);
}

const void* elementAt(const void* buffer, DataType dtype, std::size_t offset) {
  return static_cast<const std::byte*>(buffer) + offset * dataTypeSize(dtype);
}

}  // namespace chimera::bench
