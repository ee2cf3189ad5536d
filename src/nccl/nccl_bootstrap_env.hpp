// SPDX-License-Identifier: Apache-2.0
// The environment a launcher gives each rank of an NCCL world it starts without MPI (as
// torchrun does for PyTorch): rank, world size, node-local rank and size, and the NCCL
// unique id as hex. Read by createNcclBackendFromEnv; written by chimera-rank-launch.
// CUDA-free, so unit-testable.
#pragma once

#include <string>
#include <string_view>

#include "chimera/nccl_backend.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// One rank's place in a launched world.
struct NcclBootstrapEnv {
  int rank = 0;            ///< CHIMERA_RANK
  int worldSize = 1;       ///< CHIMERA_WORLD_SIZE
  int localRank = 0;       ///< CHIMERA_LOCAL_RANK (default: CHIMERA_RANK)
  int localWorldSize = 1;  ///< CHIMERA_LOCAL_WORLD_SIZE (default: CHIMERA_WORLD_SIZE)
  NcclUniqueId id;         ///< CHIMERA_NCCL_UNIQUE_ID, 2 * kNcclUniqueIdBytes hex digits
};

/// The unique id as lower-case hex (2 * kNcclUniqueIdBytes characters).
std::string uniqueIdToHex(const NcclUniqueId& id);
/// Parses uniqueIdToHex's text. InvalidArgument naming the length or the bad character.
[[nodiscard]] Status uniqueIdFromHex(std::string_view text, NcclUniqueId& out);

/// Reads the variables above. InvalidArgument naming the variable when one is missing or
/// malformed, or when a rank is outside its size.
[[nodiscard]] Status readNcclBootstrapEnv(NcclBootstrapEnv& out);

}  // namespace chimera::detail
