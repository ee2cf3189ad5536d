// SPDX-License-Identifier: Apache-2.0
// The collectives of the NCCL backend's MPI bootstrap (createNcclBackendMpi), each bounded
// like every wait of the MPI backend: a non-blocking MPI call completed through its bounded
// waits (mpi/bounded_wait.hpp), so a rank that never arrives is a Timeout naming the
// step, not a hang. They need MPI, not CUDA.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>

#include "chimera/status.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {

/// Every member of `world` learns whether all members succeeded at `step` (one MIN
/// MPI_Iallreduce): returns `local` on a failing rank, BackendError "another rank failed at
/// <step>" on the others, Timeout naming the step when a member does not arrive within
/// `world.timeoutMs`. Collective over `world`.
[[nodiscard]] Status agreeOnStep(const MpiGroup& world, const Status& local, std::string_view step);

/// This rank's index among the members of `world` on its node and their number: the members
/// whose MPI_Get_processor_name equals this rank's, by world rank (one MPI_Iallgather).
/// Collective over `world`.
[[nodiscard]] Status nodeLocalRank(const MpiGroup& world, int& localRank, int& localRanks);

/// Copies `bytes` of member 0 into every member's `bytes` (one MPI_Ibcast); `what` names the
/// data in errors. Collective over `world`.
[[nodiscard]] Status broadcastFromFirst(const MpiGroup& world, std::span<std::byte> bytes, std::string_view what);

}  // namespace chimera::detail
