// SPDX-License-Identifier: Apache-2.0
// Geometry helpers of the executor: the blocks a collective splits a local tensor into, and
// whether a box is one contiguous stretch of its tensor (then it is sent or received in place).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera::detail {

/// InvalidArgument unless `axes` is a non-empty set of axes of `mesh`.
[[nodiscard]] Status checkGroup(const Mesh& mesh, AxisSet axes);

/// The `n` equal blocks of a tensor of `shape` along `dim`, block g covering
/// [g*shape[dim]/n, (g+1)*shape[dim]/n). InvalidArgument when `dim` is out of range or its
/// extent does not divide by `n`.
[[nodiscard]] Status splitBlocks(const std::vector<std::int64_t>& shape, int dim, int n, std::vector<Box>& out);

/// True when the blocks of splitBlocks along `dim` are contiguous, consecutive stretches of
/// the tensor (every dimension before `dim` has extent 1).
bool blocksContiguous(const std::vector<std::int64_t>& shape, int dim);

/// Sets `contiguous` when `box` is one contiguous stretch of the row-major tensor of `shape`,
/// and then `byteOffset` to its first byte; `runBytes`, when not null, to the bytes of one run
/// of the box (its longest stretches contiguous in the tensor). InvalidArgument when the box
/// does not fit.
[[nodiscard]] Status contiguousOffset(const std::vector<std::int64_t>& shape, const Box& box, std::size_t elementSize,
                                      std::size_t& byteOffset, bool& contiguous, std::size_t* runBytes = nullptr);

}  // namespace chimera::detail
