// SPDX-License-Identifier: Apache-2.0
// Tensor specs and boxes (stable API): a tensor's logical shape and element type, and the
// rectangular blocks of it that ranks hold and move.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera {

/// A rectangular block of a tensor: per dimension a first index and an extent, in
/// elements. Used both in logical (full tensor) coordinates and in a rank's local
/// coordinates. Dimension 0 is outermost (row-major).
struct Box {
  std::vector<std::int64_t> offset;  ///< first index per dimension
  std::vector<std::int64_t> extent;  ///< elements per dimension (0 means the box is empty)

  /// Number of elements (product of the extents; 1 for a zero-dimensional box).
  std::int64_t volume() const;
  /// True when some extent is 0.
  bool empty() const;
  /// The common part of two boxes of the same rank (an empty box when they do not meet).
  Box intersect(const Box& other) const;
  /// True when `other` lies inside this box.
  bool contains(const Box& other) const;
  /// This box shifted by `-origin` per dimension (logical -> local coordinates).
  Box relativeTo(const std::vector<std::int64_t>& origin) const;
  /// "[0:4,8:16]" (half-open ranges per dimension).
  std::string toString() const;
  bool operator==(const Box&) const = default;
};

/// The logical (full, unsharded) shape and element type of a tensor. Each rank's local
/// shape follows from a Layout (see `Layout::localShape`).
struct TensorSpec {
  std::vector<std::int64_t> shape;  ///< extent per dimension, each >= 1
  DataType dtype = DataType::F32;

  /// Parses "8192,2048" (also "8192x2048") into `shape`. InvalidArgument on malformed text,
  /// an extent < 1, more than 8 dimensions, or an element count that overflows.
  [[nodiscard]] static Status parseShape(std::string_view text, std::vector<std::int64_t>& out);
  /// Number of dimensions.
  int rank() const { return static_cast<int>(shape.size()); }
  /// Number of elements of the full tensor.
  std::int64_t numElements() const;
  /// Bytes of the full tensor.
  std::int64_t bytes() const;
  /// The box covering the whole tensor.
  Box fullBox() const;
  /// "8192x2048 bf16".
  std::string toString() const;
  bool operator==(const TensorSpec&) const = default;
};

}  // namespace chimera
