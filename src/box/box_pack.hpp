// SPDX-License-Identifier: Apache-2.0
// Host pack/unpack of tensor boxes (private): the CPU path of the many-to-many transfers
// (MPI executor) and the reference the CUDA kernels are tested against. Built on the same
// index math as the CUDA kernels (box_index.hpp). C++17: the kernels include it.
#pragma once

#include <cstddef>
#include <string>

#include "box/box_index.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// InvalidArgument naming the broken rule and the box ("box [8x8] offset [0,6] extent
/// [2,4]: box offset + extent exceeds the tensor extent"), or ok when `box` is valid.
[[nodiscard]] Status validateBox(const TensorBox& box);

/// "[2x4] at [0,6] of [8x8]" (for messages and logs).
std::string describeBox(const TensorBox& box);

/// Copies the elements of `box` out of the row-major `tensor` into `packed`, contiguous in
/// row-major box order. Byte-generic: `elementSize` bytes per element (any value >= 1).
/// `tensor` and `packed` must not overlap. InvalidArgument on an invalid box, element
/// size 0, or a null pointer. O(volume) bytes moved, one memcpy per run.
[[nodiscard]] Status packBoxHost(const void* tensor, void* packed, const TensorBox& box, std::size_t elementSize);

/// The inverse of packBoxHost: writes the contiguous `packed` elements into `box` of
/// `tensor`, leaving the rest of the tensor untouched. Same preconditions and errors.
[[nodiscard]] Status unpackBoxHost(const void* packed, void* tensor, const TensorBox& box, std::size_t elementSize);

}  // namespace chimera::detail
