// SPDX-License-Identifier: Apache-2.0
// Cross-rank agreement, backend-neutral: the members of a group learn the smallest and
// largest value of a few words (a signature hash, a failure flag, flags to OR, the fields of
// a call) from one element-wise MIN over the words and their negations, so every member
// reaches the same verdict instead of some of them hanging. The reduction is the caller's,
// built on its transport's own collectives (an MPI reduction or exchange, an ncclAllReduce,
// Backend::allReduce). Used by the Executor, the Session and both backends.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "chimera/op_kind.hpp"
#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Replaces every word by its minimum over the group, collectively: each member passes as
/// many words. Errors (BackendError, Timeout) are returned as they are.
using GroupMin = std::function<Status(std::span<std::int64_t> words)>;

/// The smallest and largest value of each word across a group.
struct WordRange {
  std::vector<std::int64_t> low;
  std::vector<std::int64_t> high;
  /// True when word `i` has one value across the group.
  bool agreed(std::size_t i) const { return low[i] == high[i]; }
};

/// Collective: one `min` over `words` and their negations gives the range of each word.
[[nodiscard]] Status agreeOnRange(std::span<const std::int64_t> words, const GroupMin& min, WordRange& out);

/// What a group agreed on about a signature (a plan's, a window's).
struct SignatureVerdict {
  std::int64_t lowHash = 0;         ///< smallest hash of the group
  std::int64_t highHash = 0;        ///< largest hash of the group
  bool anyFailed = false;           ///< some member failed locally
  std::int64_t failedRank = -1;     ///< the lowest `rank` of a member that failed (-1: none)
  std::vector<std::uint8_t> flags;  ///< the members' flags OR-ed
  /// True when every member contributed the same hash.
  bool sameHash() const { return lowHash == highHash; }
};

/// Collective: agrees on `hash`, a local failure flag (with the member's `rank`, as messages
/// name it, so the verdict names the lowest failing one) and `flags` (OR-ed). Every member must
/// pass as many flags (pad to a fixed count when members may differ).
[[nodiscard]] Status agreeOnSignature(std::int64_t hash, bool failed, int rank, std::span<const std::uint8_t> flags,
                                      const GroupMin& min, SignatureVerdict& out);

/// What every member of a group passes identically to one collective; fields a collective
/// does not use stay at their defaults.
struct CallSignature {
  OpKind kind = OpKind::AllReduce;
  std::int64_t count = 0;  ///< the call's count argument (elements)
  DataType dtype = DataType::F32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
};

/// Collective: agrees on `signature` and whether `local` is ok. Returns `local` when it is an
/// error; Mismatch naming the lowest member `rank` whose `local` was an error when another
/// member reported bad arguments ("rank 3: rank 7 of group tp refused its allReduce ...");
/// else Mismatch naming `rank`, `group` and every field whose values differ, with their min
/// and max ("rank 3: members of group tp disagree on the arguments of allReduce: count differs
/// (min 16, max 17)"); errors of `min` as they are. `rank` is the caller's rank as messages
/// name it (every member numbers the same way).
[[nodiscard]] Status agreeOnCall(const CallSignature& signature, const Status& local, int rank, std::string_view group,
                                 const GroupMin& min);

/// The Mismatch of rank `self` whose point-to-point peer `peer` refused its transfers with it
/// (its own checks failed), in the same words on every transport's per-pair manifests.
[[nodiscard]] Status transfersRefused(int peer, int self);

/// A word that changes no minimum. A transport's agreement round carries one more word than its
/// caller's, the stand-in marker: this value from a member taking part for itself, a rank from a
/// member standing in for a rank whose call failed before it knew the round's group (the
/// transports' fault notices), which sends this value for every other word.
inline constexpr std::int64_t kStandInNeutral = std::numeric_limits<std::int64_t>::max();

/// The `words` words (the last the marker) rank `rank` stands in with.
[[nodiscard]] std::vector<std::int64_t> standInWords(int words, int rank);

/// The Mismatch of every member of `round` (what waited, and where) that rank `rank` stood in
/// for, naming its error `fault` (empty: not known here), in the same words on every transport.
[[nodiscard]] Status stoodIn(std::string_view round, int rank, std::string_view fault);

/// What a transport creates in Backend::createGroups, for the messages of agreeOnNewGroups.
struct NewGroups {
  std::int64_t hash = 0;   ///< of the groups' axis sets, in the order given
  std::string_view names;  ///< the groups' axes as the messages name them ("tp, dp+tp")
  std::string_view what;   ///< what is made: "communicators", "gloo groups"
  std::string_view mesh;   ///< the mesh, as Mesh::toString prints it
};

/// Collective over the world: the groups every rank is about to create agree, so that ranks
/// creating different groups at once all fail instead of waiting for each other. Returns
/// `local` when it is an error (axes the mesh lacks); InvalidArgument when another rank
/// reported one; Mismatch naming `rank` when the ranks' groups differ (none may then be made);
/// errors of `min` as they are.
[[nodiscard]] Status agreeOnNewGroups(const NewGroups& groups, const Status& local, int rank, const GroupMin& min);

}  // namespace chimera::detail
