// SPDX-License-Identifier: Apache-2.0
// Bounded agreement on a few words across a group: the building block of the argument
// check and of group creation. Small groups exchange the words directly (every member sends
// every other member its words), so a member that never joins is named in the Timeout; large
// groups use one non-blocking library reduction.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "backend/mpi/mpi_group.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// Groups up to this size exchange words directly (n-1 small messages per member, one
/// round); larger ones use MPI_Iallreduce (log n rounds, no late peer named).
inline constexpr int kDirectAgreementLimit = 16;

/// The smallest and largest value of each word across a group.
struct WordRange {
  std::vector<long long> low;
  std::vector<long long> high;
  /// True when every word has one value across the group.
  bool agreed() const { return low == high; }
};

/// Collective over `group`: every member passes the same number of `words`; `out` receives
/// the range of each. `tag` must be used by no other message on `group.comm`. Waits are bounded
/// by group.timeoutMs (Timeout naming `what`, the group and the members that did not join).
[[nodiscard]] Status agreeOnWords(const MpiGroup& group, std::span<const long long> words, int tag,
                                  std::string_view what, WordRange& out);

}  // namespace chimera::detail
