// SPDX-License-Identifier: Apache-2.0
// Bandwidth-optimal ring collectives over MPI point-to-point with local (host_reduce)
// reduction. Each of the n-1 steps moves 1/n of the data to the right-hand neighbour.
// ReduceScatter sends each step's block as segments of at most `segmentBytes`, all at
// once, and receives them one by one into a segment-sized slot that is reduced while still
// in cache; a step still costs one synchronisation. AllGather has nothing to reduce and
// sends whole blocks (`kUnsegmented`); its `segmentBytes` makes every segment travel the
// whole ring before the next one starts. Measurements: docs/performance.md.
#pragma once

#include <cstddef>

#include "chimera/status.hpp"
#include "chimera/types.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/scratch_buffer.hpp"

namespace chimera::detail {

/// Segment size meaning whole blocks (cut only at MPI's int count limit).
inline constexpr std::size_t kUnsegmented = static_cast<std::size_t>(-1);

/// `count` elements cut into `parts` contiguous blocks whose sizes differ by at most one
/// (the first `count % parts` blocks hold one element more).
struct BlockSplit {
  std::size_t count = 0;
  int parts = 1;
  /// First element of block `i`.
  std::size_t offset(int i) const;
  /// Elements in block `i`.
  std::size_t size(int i) const;
};

/// Ring ReduceScatter: `send` holds `split.count` elements; `out` receives block
/// `group.index` reduced over the group with `op` (Avg is left as the Sum). `out` may
/// alias that block of `send` exactly. Scratch: two blocks and one segment. Collective
/// over `group`.
[[nodiscard]] Status ringReduceScatter(const void* send, void* out, BlockSplit split, DataType dtype, ReduceOp op,
                                       const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes);

/// Ring AllGather in place: `buf` holds `split.count` elements with this rank's block at
/// `split.offset(group.index)`; on return every block is filled. Collective over `group`.
[[nodiscard]] Status ringAllGather(void* buf, BlockSplit split, DataType dtype, const MpiGroup& group,
                                   std::size_t segmentBytes);

}  // namespace chimera::detail
