// SPDX-License-Identifier: Apache-2.0
// Hierarchical AllReduce, ReduceScatter and AllGather for a group whose members span hosts
// (private): inside each host first, then across the hosts on the lanes (each lane member with
// its counterparts on the other hosts), then inside each host again, so that every byte crosses
// the slow link between hosts once per direction instead of once per member. The steps, their
// bytes and the order of the reductions: docs/performance.md ("Across hosts").
#pragma once

#include <cstddef>

#include "chimera/status.hpp"
#include "chimera/types.hpp"
#include "mpi/host_hierarchy.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/scratch_buffer.hpp"

namespace chimera::detail {

/// AllReduce of `count` elements over `group` (Avg finished here), pipelined over pieces of the
/// buffer (hierarchicalPieces). Each piece is cut into one chunk per lane (BlockSplit over the
/// lanes): (1) each host reduces chunk j onto its lane-j member (a direct ReduceScatter inside
/// the host; members beyond the lanes only send); (2) each lane reduces its chunk across the
/// hosts (direct ReduceScatter of the chunk cut into one block per host, Avg division, direct
/// AllGather), posted and completed a pipeline step later; (3) each lane member sends its
/// chunk to the other members of its host. While piece p crosses the hosts, the host reduces
/// piece p + 1 and spreads piece p - 1. Every element is reduced in the same order whatever
/// the pieces. In place when send == recv. `staging`: three pieces' copies of a lane block.
/// Collective over `group`.
[[nodiscard]] Status hierarchicalAllReduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                                           const MpiGroup& group, const HostHierarchy& hierarchy,
                                           ScratchBuffer& scratch, ScratchBuffer& staging, std::size_t segmentBytes);

/// Pieces a hierarchical collective over `bytes` is pipelined over: pieces of at least two
/// segments, at most kMostHierarchicalPieces (on the rig of docs/multihost.md, 16 MiB ran
/// fastest in 8 pieces), at least one.
int hierarchicalPieces(std::size_t bytes, std::size_t segmentBytes);
inline constexpr int kMostHierarchicalPieces = 8;

/// ReduceScatter: member i receives block i (`recvCount` elements, the group's block order) of
/// the reduction over `group` (Avg finished here), pipelined over pieces of every block
/// (hierarchicalPieces of the input). (1) Each host reduces the blocks of lane j (the blocks of
/// every member that lane j serves, on every host) onto its lane-j member; (2) each lane
/// ReduceScatters them across the hosts, block i to the lane member of i's host, posted and
/// completed a pipeline step later; (3) a lane member keeps its own block and sends the others
/// it holds to their members on its host (none when every host holds as many members as
/// lanes). Bit for bit the result of one piece. `recv` may be block i of `send`. `staging`: the
/// whole input and three pieces' copies. Collective over `group`.
[[nodiscard]] Status hierarchicalReduceScatter(const void* send, void* recv, std::size_t recvCount, DataType dtype,
                                               ReduceOp op, const MpiGroup& group, const HostHierarchy& hierarchy,
                                               ScratchBuffer& scratch, ScratchBuffer& staging,
                                               std::size_t segmentBytes);

/// AllGather: `recv` receives the blocks of every member in group order (`sendCount` each),
/// bit for bit those of the flat AllGather. (1) A member beyond the lanes sends its block to
/// the lane member that serves it; (2) each lane AllGathers its blocks across the hosts, piece
/// by piece (hierarchicalPieces of the output), each posted a pipeline step before (3) each
/// lane member sends that piece of its lane's blocks to the other members of its host. In place
/// when send is block i of recv. Collective over `group`.
[[nodiscard]] Status hierarchicalAllGather(const void* send, void* recv, std::size_t sendCount, DataType dtype,
                                           const MpiGroup& group, const HostHierarchy& hierarchy,
                                           std::size_t segmentBytes);

}  // namespace chimera::detail
