// SPDX-License-Identifier: Apache-2.0
// Point-to-point alternatives to the MPI library's AllToAll and Broadcast, selected by
// measurement in the MPI backend (docs/performance.md).
#pragma once

#include <cstddef>

#include "backend/mpi/mpi_group.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Pairwise-exchange AllToAll: in step s (1..n-1) member i sends its block (i+s) mod n and
/// receives block (i-s) mod n, one MPI_Sendrecv each; the own block is copied locally.
/// Out-of-place; `countPerPeer` <= INT_MAX. Collective over `group`.
[[nodiscard]] Status pairwiseAllToAll(const void* send, void* recv, std::size_t countPerPeer, DataType dtype,
                                      const MpiGroup& group);

/// Broadcast as MPI_Scatterv of the root's buffer into n blocks followed by a ring
/// AllGather (bandwidth 2(n-1)/n of the message instead of a tree's log n). `send` is read
/// on the root only; in-place when send == recv. `count` <= INT_MAX. Collective over `group`.
[[nodiscard]] Status scatterAllGatherBroadcast(const void* send, void* recv, std::size_t count, DataType dtype,
                                               int root, const MpiGroup& group);

}  // namespace chimera::detail
