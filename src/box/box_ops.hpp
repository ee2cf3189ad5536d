// SPDX-License-Identifier: Apache-2.0
// The backends' box operations over host memory (private): a public Box of a tensor's local
// shape turned into the index-math TensorBox, and Backend::packBox/unpackBox for host buffers.
#pragma once

#include <cstdint>
#include <span>

#include "box/box_index.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Fills `out` with `box` of the row-major tensor of `shape`. InvalidArgument when the box
/// has a different number of dimensions, is empty, or does not fit the shape.
[[nodiscard]] Status toTensorBox(std::span<const std::int64_t> shape, const Box& box, TensorBox& out);

/// Backend::packBox over host memory.
[[nodiscard]] Status hostPackBox(const void* tensor, std::span<const std::int64_t> shape, const Box& box, void* packed,
                                 DataType dtype);
/// Backend::unpackBox over host memory.
[[nodiscard]] Status hostUnpackBox(const void* packed, void* tensor, std::span<const std::int64_t> shape,
                                   const Box& box, DataType dtype);

}  // namespace chimera::detail
