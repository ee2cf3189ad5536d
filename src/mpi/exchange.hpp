// SPDX-License-Identifier: Apache-2.0
// Point-to-point alternatives to the MPI library's AllToAll and Broadcast, selected by
// measurement in the MPI backend (docs/performance.md).
#pragma once

#include <cstddef>

#include "chimera/status.hpp"
#include "chimera/types.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/ring.hpp"
#include "mpi/scratch_buffer.hpp"

namespace chimera::detail {

/// Pairwise-exchange AllToAll: in step s (1..n-1) member i sends its block (i+s) mod n and
/// receives block (i-s) mod n, as MPI_Sendrecv calls of at most `maxMessageCount` elements;
/// the own block is copied locally. Out-of-place. Collective over `group`.
[[nodiscard]] Status pairwiseAllToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype,
                                      const MpiGroup& group, std::size_t maxMessageCount);

/// Direct ReduceScatter: every member sends block j of `send` straight to member j (all
/// segments of at most `segmentBytes` posted at once), and reduces the n-1 incoming copies
/// of its own block segment by segment into `out`, which stays in cache across peers.
/// Same bytes on the wire as the ring, one synchronisation instead of n-1, and the partial
/// sums never leave the cache. `out` receives block `group.index` (Avg left as the Sum) and
/// may alias that block of `send` exactly. Scratch: one segment. Collective over `group`.
[[nodiscard]] Status directReduceScatter(const void* send, void* out, BlockSplit split, DataType dtype, ReduceOp op,
                                         const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes);

/// Direct AllGather in place: `buf` holds `split.count` elements with this rank's block at
/// `split.offset(group.index)`; every member sends its block to every other member and
/// receives theirs straight into `buf`, all transfers posted at once (one synchronisation
/// instead of the ring's n-1). Blocks over INT_MAX elements fall back to the ring.
/// Collective over `group`.
[[nodiscard]] Status directAllGather(void* buf, BlockSplit split, DataType dtype, const MpiGroup& group);

/// AllReduce = direct ReduceScatter (segments of `segmentBytes`) into this rank's block of
/// `recv`, Avg division of that block, direct AllGather of `recv`. In-place when
/// send == recv. Collective over `group`.
[[nodiscard]] Status pointToPointAllReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                                           const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes);

/// Broadcast as MPI_Scatterv of the root's buffer into n blocks followed by a ring
/// AllGather (bandwidth 2(n-1)/n of the message instead of a tree's log n). `send` is read
/// on the root only; in-place when send == recv. `count` <= INT_MAX. `staging` (not null): the
/// scatter's output goes through it (library_output.hpp). Collective over `group`.
[[nodiscard]] Status scatterAllGatherBroadcast(const void* send, void* recv, std::size_t count, DataType dtype,
                                               int root, const MpiGroup& group, ScratchBuffer* staging);

}  // namespace chimera::detail
