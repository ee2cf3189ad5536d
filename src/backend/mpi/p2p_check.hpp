// SPDX-License-Identifier: Apache-2.0
// The argument agreement of point-to-point calls (CHIMERA_CHECK_ARGS): every pair of ranks
// that exchange messages compares, before any payload moves, what one side sends with what
// the other receives.
#pragma once

#include <mpi.h>

#include <span>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Agreement check of a grouped point-to-point call on `comm` (world ranks), made by rank
/// `self` with `ops` that passed the local checks. Each rank sends every peer of `ops` a
/// manifest (kind, count and dtype of each op with that peer, in order) and receives theirs,
/// so both ends of a pair judge the same two lists: the sends of one must match the receives
/// of the other, op by op, in count and dtype. Returns Mismatch naming the two lists (on both
/// ends of the pair), or BackendError when MPI fails. A peer that makes no matching call at
/// all is not detected (its manifest never arrives), as with the payload itself.
[[nodiscard]] Status agreeOnTransfers(MPI_Comm comm, int self, std::span<const P2POp> ops);

}  // namespace chimera::detail
