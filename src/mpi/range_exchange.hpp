// SPDX-License-Identifier: Apache-2.0
// Direct exchanges over lists of element ranges (private): the steps the hierarchical
// collectives are made of, where what a member owns is not one contiguous block of the
// group's buffer but a list of ranges (its lane's blocks). Every range is in the coordinates of
// the whole buffer, so sender and receiver name the same elements by the same offsets, and both
// build their lists from the same layout (host_layout.hpp): the messages of a pair match in order.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "chimera/status.hpp"
#include "chimera/types.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_group.hpp"
#include "mpi/scratch_buffer.hpp"

namespace chimera::detail {

/// Elements [offset, offset + count) of a buffer.
struct ElementRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};

/// Ranges in ascending order, adjacent ones merged (one message where they touch).
using RangeList = std::vector<ElementRange>;

/// Appends `range` to `list`, merged into the last range when it starts where that one ends;
/// an empty range is dropped.
void appendRange(RangeList& list, ElementRange range);

/// Direct ReduceScatter over ranges: member d ends with out[r] = the reduction over the group of
/// send[r] (Avg left as the Sum), for every range r of `parts[d]` (parts.size() == group.size;
/// ranges of different members disjoint). A member with no parts only sends. Every member
/// sends each range in segments of at most `segmentBytes`, all posted at once; a receiver takes
/// the copies of each segment from its peers in the order me-1, me-2, ... (wrapping), two
/// receives in flight, and reduces each into `out`, starting from its own copy. `out` may be
/// `send` (in place) or another buffer of the same size; elements outside parts[me] are not
/// written. Scratch: two segments. Collective over `group`.
[[nodiscard]] Status reduceRanges(const void* send, void* out, std::span<const RangeList> parts, DataType dtype,
                                  ReduceOp op, const MpiGroup& group, ScratchBuffer& scratch, std::size_t segmentBytes);

/// This member's side of a point-to-point exchange of ranges: `sends[d]` are the ranges of the
/// source buffer it sends to member d, `receives[d]` the ranges of the target buffer it receives
/// from member d (each list empty or of group.size entries; the entry of this member unused).
/// The lists of a pair must agree range by range in size.
struct RangeTransfers {
  std::vector<RangeList> sends;
  std::vector<RangeList> receives;
};

/// Moves the ranges of `transfers`: every receive and send posted at once (messages of at most
/// INT_MAX elements), one bounded wait. `from` and `to` may be one buffer when no range sent
/// overlaps one received. Collective over the members named in `transfers`.
[[nodiscard]] Status exchangeRanges(const void* from, void* to, const RangeTransfers& transfers, DataType dtype,
                                    const MpiGroup& group);

/// exchangeRanges posted and not waited for: its requests join `set`, tagged `tag`, the receives
/// lending as `receives` says (Lends::Chimera for memory chimera keeps). Each range is sent or
/// received as listed, cut into messages of at most INT_MAX elements, so a receiver may list
/// adjacent ranges apart to match a sender's.
[[nodiscard]] Status postRanges(const void* from, void* to, const RangeTransfers& transfers, DataType dtype,
                                const MpiGroup& group, int tag, Lends receives, RequestSet& set);

}  // namespace chimera::detail
