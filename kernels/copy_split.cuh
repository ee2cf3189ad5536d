// SPDX-License-Identifier: Apache-2.0
// How a warp copies one piece of a run with the widest vectors the two addresses allow,
// shared by the pack kernel and its CPU tests: 16-byte vectors when source and destination
// agree modulo 16, else 8-byte, else 4-byte ones, so a box whose tensor-side offset is
// misaligned (e.g. a bf16 column offset of 4) still moves in vectors instead of elements.
// Usable from g++ and nvcc; no CUDA headers.
#pragma once

#include <cstdint>

#include "box/box_index.hpp"

namespace chimera {

/// A piece of `n` elements split into a scalar head (up to the first `width`-aligned
/// address), `vectors` aligned vectors of `width` bytes, and a scalar tail.
struct CopySplit {
  /// Vector width in bytes: 16, 8 or 4, or the element size when no wider one fits (then
  /// everything is head).
  int width = 0;
  /// Elements copied one by one before the first vector.
  std::int64_t head = 0;
  /// Whole vectors after the head.
  std::int64_t vectors = 0;
  /// Elements copied one by one after the vectors.
  std::int64_t tail = 0;
};

/// The split for copying `n` elements of `elementSize` bytes (1, 2, 4 or 8) from address
/// `src` to `dst`, both aligned to the element size: the widest width in {16, 8, 4} (not
/// below the element size) at which the two addresses agree, so that after the head both are
/// aligned to it. O(1).
CHIMERA_HD inline CopySplit copySplit(std::uint64_t src, std::uint64_t dst, std::int64_t n, int elementSize) {
  CopySplit split;
  split.width = elementSize;
  for (int width = 16; width >= 4 && width > elementSize; width /= 2) {
    if ((src ^ dst) % static_cast<std::uint64_t>(width) == 0) {
      split.width = width;
      break;
    }
  }
  if (split.width == elementSize) {
    split.head = n;
    return split;
  }
  const auto width = static_cast<std::uint64_t>(split.width);
  const auto toBoundary = static_cast<std::int64_t>((width - src % width) % width) / elementSize;
  split.head = toBoundary < n ? toBoundary : n;
  const std::int64_t perVector = split.width / elementSize;
  split.vectors = (n - split.head) / perVector;
  split.tail = n - split.head - split.vectors * perVector;
  return split;
}

}  // namespace chimera
