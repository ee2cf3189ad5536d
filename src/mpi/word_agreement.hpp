// SPDX-License-Identifier: Apache-2.0
// The MPI backend's reduction for agreements (common/agreement.hpp): a bounded element-wise
// MIN of a few words over a group. Small groups exchange the words directly (every member
// sends every other member its words), so a member that never joins is named in the Timeout;
// large groups use one non-blocking library reduction. Every round carries one more word, the
// stand-in marker: a member at fault that did not know the round's group takes part in it
// (standIn, through fault_notice.hpp) with words that change no minimum and its world rank as
// the marker, so that every member fails the round naming it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "chimera/status.hpp"
#include "common/agreement.hpp"
#include "mpi/fault_notice.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {

/// Groups up to this size exchange words directly (n-1 small messages per member, one
/// round); larger ones use MPI_Iallreduce (log n rounds, no late peer named).
inline constexpr int kDirectAgreementLimit = 16;

/// The most words a round sends (a stand-in asked for more is refused).
inline constexpr int kStandInWordsLimit = 256;

/// Collective over `group`: replaces every word by its minimum over the group. `tag` must be
/// used by no other message on `group.comm`. Waits are bounded by group.timeoutMs (Timeout
/// naming `what`, the group and the members that did not join). Mismatch naming the member
/// that stood in for the round (it failed the call before it knew the group).
[[nodiscard]] Status minOverGroup(const MpiGroup& group, std::span<std::int64_t> words, int tag, std::string_view what);

/// Takes part in the round `offer` names on `group` for world rank `worldRank`, whose call
/// failed before it knew the group: words that change no minimum, and the stand-in marker.
/// Bounded as minOverGroup.
[[nodiscard]] Status standIn(const MpiGroup& group, const StandInOffer& offer, int worldRank);

/// minOverGroup as the GroupMin of an agreement. `group` must outlive the result.
GroupMin groupMin(const MpiGroup& group, int tag, std::string what);

}  // namespace chimera::detail
