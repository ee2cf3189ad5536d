// SPDX-License-Identifier: Apache-2.0
// The local (no communication) operations a plan needs, shared by the backends: a public
// Box in a tensor's local coordinates turned into the index-math TensorBox, and the host
// implementations of Backend::packBox/unpackBox/scale used by the MPI backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "box_index.cuh"
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
/// Backend::scale over host memory, with the CUDA scaleBuffer's rounding rules: f16/bf16/f32
/// multiply in float, f64 in double, integers in double truncated toward zero and saturated.
[[nodiscard]] Status hostScale(const void* input, void* output, std::size_t count, DataType dtype, double factor);

}  // namespace chimera::detail
