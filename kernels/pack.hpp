// SPDX-License-Identifier: Apache-2.0
// Device pack/unpack of tensor boxes (private; host-callable, no CUDA headers): the GPU
// half of many-to-many transfers. A pack gathers a box of a row-major tensor into a
// contiguous buffer; an unpack scatters it back. Same index math as the host path
// (src/box/box_index.hpp, src/box/box_pack.hpp).
#pragma once

#include <cstddef>

#include "box/box_index.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Boxes moved by one kernel launch; longer lists are split into several launches (the
/// list travels as a kernel parameter, kept under the portable 4 KiB limit).
inline constexpr int kMaxBoxesPerLaunch = 16;

/// One box of a tensor and its contiguous counterpart, both in device memory.
struct BoxCopy {
  /// The box, in elements of the tensor.
  TensorBox box;
  /// Base of the whole row-major tensor (element [0,...,0]). Read by pack, written by unpack.
  void* tensor = nullptr;
  /// Start of the box's contiguous elements (boxVolume(box) of them). Written by pack, read by unpack.
  void* packed = nullptr;
};

/// For each copy, gathers `box` of `tensor` into `packed` (row-major box order), all copies
/// in one launch per kMaxBoxesPerLaunch: e.g. one box per destination peer of a
/// many-to-many transfer. Bits are copied exactly. Ordered on `stream` (a cudaStream_t;
/// nullptr = legacy default stream); never synchronises; capturable into a CUDA graph.
/// Preconditions: device pointers aligned to the element size; a copy's packed range must
/// not overlap its tensor. Errors: InvalidArgument (null pointer, invalid box, misaligned or
/// overlapping buffers, null `copies` with count > 0), BackendError (launch failed).
[[nodiscard]] Status packBoxes(const BoxCopy* copies, std::size_t count, DataType dtype, void* stream);

/// The inverse of packBoxes: scatters each `packed` into `box` of `tensor`, leaving the
/// rest of the tensor untouched. Boxes of one call must not overlap each other in the
/// tensor (the copies run concurrently). Same preconditions, stream semantics and errors.
[[nodiscard]] Status unpackBoxes(const BoxCopy* copies, std::size_t count, DataType dtype, void* stream);

}  // namespace chimera::detail
