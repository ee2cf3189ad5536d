// SPDX-License-Identifier: Apache-2.0
// The MPI backend's reduction for agreements (common/agreement.hpp): a bounded element-wise
// MIN of a few words over a group. Small groups exchange the words directly (every member
// sends every other member its words), so a member that never joins is named in the Timeout;
// large groups use one non-blocking library reduction.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "chimera/status.hpp"
#include "common/agreement.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {

/// Groups up to this size exchange words directly (n-1 small messages per member, one
/// round); larger ones use MPI_Iallreduce (log n rounds, no late peer named).
inline constexpr int kDirectAgreementLimit = 16;

/// Collective over `group`: replaces every word by its minimum over the group. `tag` must be
/// used by no other message on `group.comm`. Waits are bounded by group.timeoutMs (Timeout
/// naming `what`, the group and the members that did not join).
[[nodiscard]] Status minOverGroup(const MpiGroup& group, std::span<std::int64_t> words, int tag, std::string_view what);

/// minOverGroup as the GroupMin of an agreement. `group` must outlive the result.
GroupMin groupMin(const MpiGroup& group, int tag, std::string what);

}  // namespace chimera::detail
