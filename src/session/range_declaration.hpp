// SPDX-License-Identifier: Apache-2.0
// A consume declaration given as a byte range of the rank's buffer, and the layout it
// resolves to: the smallest layout readable from the value's that covers every rank's range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chimera/layout.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera::detail {

/// Bytes [offset, offset + bytes) of one rank's local buffer.
struct ByteRange {
  std::size_t offset = 0;
  std::size_t bytes = 0;
  bool operator==(const ByteRange&) const = default;
};

/// Most layouts a byte-range declaration is matched against.
inline constexpr std::size_t kMaxRangeCandidates = 64;

/// Checks `range` against the buffer of a value placed as `value` on `rank`: inside the local
/// tensor, whole elements, and empty on a rank that holds nothing. InvalidArgument naming the
/// problem.
[[nodiscard]] Status checkByteRange(const Layout& value, const TensorSpec& spec, int rank, ByteRange range);

/// The layouts a byte-range declaration on a value placed as `value` may resolve to: `value`
/// itself first, then the layouts that shard some of its `R` axes over some dims, in every
/// nesting order, in a fixed order (equal on every rank), at most kMaxRangeCandidates. Every
/// one is readable from `value` (`checkConsumable`).
std::vector<Layout> rangeCandidates(const Layout& value, const TensorSpec& spec);

/// Appends one flag per candidate: 1 when `range` of `rank`'s buffer is not inside the
/// candidate's part on `rank` (an empty range is inside every part). `range` passed
/// checkByteRange.
void appendUncovered(const Layout& value, const TensorSpec& spec, int rank, ByteRange range,
                     const std::vector<Layout>& candidates, std::vector<std::uint8_t>& out);

/// The candidate no rank flagged (`uncovered` holds the OR over the ranks, one flag per
/// candidate) with the fewest local bytes, the earliest on a tie. The value's own layout is
/// never flagged, so there always is one.
const Layout& chooseRangeLayout(const std::vector<Layout>& candidates, const TensorSpec& spec,
                                const std::uint8_t* uncovered);

}  // namespace chimera::detail
