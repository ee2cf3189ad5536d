// SPDX-License-Identifier: Apache-2.0
// The argument agreement of point-to-point calls (CHIMERA_CHECK_ARGS): every pair of ranks
// that exchange messages compares, before any payload moves, what one side sends with what
// the other receives.
#pragma once

#include <mpi.h>

#include <span>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {

/// Agreement check of a grouped point-to-point call on `world` (a worldGroup: index = world
/// rank). Each rank sends every peer of `ops` a manifest (kind, count, dtype and whether it
/// moves as a box, of each op with that peer, in order) and receives theirs, so both ends of a
/// pair judge the same two lists: the sends of one must match the receives of the other, op
/// by op, in count, dtype and box. A rank whose own checks failed (`local` an error) sends
/// each peer of `ops` that is a rank of `world` a refusal instead, receives their manifests
/// and returns `local`; a peer that receives a refusal returns Mismatch naming that rank.
/// Returns Mismatch naming the two lists (on both ends of the pair), or BackendError when MPI
/// fails. `failedPeers` gets every peer (this rank included, for ops with itself) whose
/// transfers with this rank must not run: those of a mismatch or a refusal. A peer that makes no
/// matching call at all gives Timeout naming it after `world.timeoutMs` (its manifest never
/// arrives).
[[nodiscard]] Status agreeOnTransfers(const MpiGroup& world, std::span<const P2POp> ops, const Status& local,
                                      std::vector<int>& failedPeers);

}  // namespace chimera::detail
