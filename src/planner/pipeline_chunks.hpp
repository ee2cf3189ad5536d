// SPDX-License-Identifier: Apache-2.0
// The chunks of a pipelined plan as a rank's local tensors see them: where chunk c lies in a
// local tensor, whether it is one contiguous run, and what chunking copies at the chain's ends.
// Shared by the pipeline's price (src/cost/) and its run (src/exec/).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "chimera/layout.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera::detail {

/// How many blocks `layout` splits `dim` into (1 when whole).
std::int64_t splitCount(const Layout& layout, int dim);

/// Chunk c's part of a local tensor whose `dim` the layout splits into `split` of the chain's
/// `blocks` blocks: `dim` viewed as [blocks / split, chunks, rest], box [all, c, all].
struct ChunkView {
  std::vector<std::int64_t> shape;  ///< the local shape with `dim` expanded into three
  Box box;                          ///< chunk c in `shape`
  bool contiguous = false;          ///< one run at offset c x (bytes / chunks)
};

/// The view of chunk `c` of `chunks` of the local tensor of shape `local`.
ChunkView chunkView(const std::vector<std::int64_t>& local, int dim, std::int64_t blocks, std::int64_t split,
                    int chunks, int c);

/// Whether every chunk of a holder of `layout` is one contiguous run of its local tensor, when
/// `dim` is cut into chunks of the chain's `blocks` blocks (every layout's split count divides
/// them and the extent).
bool chunksContiguous(const Layout& layout, const TensorSpec& spec, int dim, std::int64_t blocks);

/// What chunking along `dim` copies at one end of the chain (its start or consumed layout):
/// each holder's whole local tensor, unless its chunks are contiguous runs (0 bytes).
struct ChunkEnd {
  std::int64_t copiedBytes = 0;
  int ranks = 0;  ///< the holders, who copy at once
};

/// The chain's two ends, start then consumed, for chunks along `dim` of `spec` (the whole tensor).
std::array<ChunkEnd, 2> chunkEnds(const ChainPlan& plan, const TensorSpec& spec, int dim);

}  // namespace chimera::detail
