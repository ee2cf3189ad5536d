// SPDX-License-Identifier: Apache-2.0
// Implements byte-range consume declarations and the layout they resolve to.
#include "session/range_declaration.hpp"

#include <algorithm>
#include <limits>

#include "core/check.hpp"

namespace chimera::detail {
namespace {

// Per dim from `dim` on, the first and last index of the row-major elements [first, last]
// of `shape[dim..]` (an exact bounding box: a box holds the range iff it holds this one).
void bound(const std::vector<std::int64_t>& shape, std::size_t dim, std::int64_t first, std::int64_t last,
           std::vector<std::int64_t>& lo, std::vector<std::int64_t>& hi) {
  if (dim == shape.size()) return;
  std::int64_t inner = 1;
  for (std::size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t firstRow = first / inner;
  const std::int64_t lastRow = last / inner;
  lo[dim] = firstRow;
  hi[dim] = lastRow;
  if (firstRow == lastRow) return bound(shape, dim + 1, first % inner, last % inner, lo, hi);
  if (lastRow - firstRow == 1) {
    // The tail of one row and the head of the next: the union of their two boxes.
    std::vector<std::int64_t> lo2 = lo, hi2 = hi;
    bound(shape, dim + 1, first % inner, inner - 1, lo, hi);
    bound(shape, dim + 1, 0, last % inner, lo2, hi2);
    for (std::size_t d = dim + 1; d < shape.size(); ++d) {
      lo[d] = std::min(lo[d], lo2[d]);
      hi[d] = std::max(hi[d], hi2[d]);
    }
    return;
  }
  for (std::size_t d = dim + 1; d < shape.size(); ++d) {  // a whole row lies in between
    lo[d] = 0;
    hi[d] = shape[d] - 1;
  }
}

Box boundingBox(const std::vector<std::int64_t>& shape, std::int64_t first, std::int64_t last) {
  std::vector<std::int64_t> lo(shape.size(), 0), hi(shape.size(), 0);
  bound(shape, 0, first, last, lo, hi);
  Box box;
  box.offset = lo;
  for (std::size_t d = 0; d < shape.size(); ++d) box.extent.push_back(hi[d] - lo[d] + 1);
  return box;
}

// Calls `visit` with every way of sharding the axes assigned per dim, in every nesting order.
template <typename Visit>
bool forEachOrder(const Layout& base, std::vector<std::vector<int>>& perDim, std::size_t dim, Visit& visit) {
  if (dim == perDim.size()) return visit(base);
  std::vector<int>& axes = perDim[dim];
  std::sort(axes.begin(), axes.end());
  do {
    Layout layout = base;
    for (int axis : axes) layout = layout.with(axis, Placement::shard(static_cast<int>(dim)));
    if (!forEachOrder(layout, perDim, dim + 1, visit)) return false;
  } while (std::next_permutation(axes.begin(), axes.end()));
  return true;
}

}  // namespace

Status checkByteRange(const Layout& value, const TensorSpec& spec, int rank, ByteRange range) {
  const std::size_t element = dataTypeSize(spec.dtype);
  const std::size_t local = value.holds(rank) ? static_cast<std::size_t>(value.localBytes(spec)) : 0;
  CHIMERA_CHECK_ARG(range.bytes == 0 || value.holds(rank),
                    "rank {} declares reading {} bytes of a tensor it does not hold (layout {}); declare 0 bytes", rank,
                    range.bytes, value.toString());
  CHIMERA_CHECK_ARG(range.offset % element == 0 && range.bytes % element == 0,
                    "byte range [{}, +{}) is not made of whole {} elements ({} bytes each)", range.offset, range.bytes,
                    dataTypeName(spec.dtype), element);
  CHIMERA_CHECK_ARG(range.bytes == 0 || (range.offset <= local && range.bytes <= local - range.offset),
                    "byte range [{}, +{}) runs past the {} bytes of rank {}'s local tensor ({} as {})", range.offset,
                    range.bytes, local, rank, spec.toString(), value.toString());
  return Status::ok();
}

std::vector<Layout> rangeCandidates(const Layout& value, const TensorSpec& spec) {
  std::vector<Layout> out{value};
  const Mesh& mesh = value.mesh();
  std::vector<int> free;
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    if (value.placement(axis).isReplicate() && mesh.axis(axis).size > 1) free.push_back(axis);
  }
  // Each free axis stays R (digit 0) or shards dim digit-1: a mixed-radix count.
  const int radix = spec.rank() + 1;
  std::vector<int> digit(free.size(), 0);
  auto visit = [&](const Layout& layout) {
    if (layout.validate(spec).isOk() && std::find(out.begin(), out.end(), layout) == out.end()) {
      out.push_back(layout);
    }
    return out.size() < kMaxRangeCandidates;
  };
  while (true) {
    std::size_t i = 0;
    while (i < digit.size() && ++digit[i] == radix) digit[i++] = 0;
    if (i == digit.size()) break;  // wrapped around: every assignment seen
    std::vector<std::vector<int>> perDim(static_cast<std::size_t>(spec.rank()));
    for (std::size_t a = 0; a < free.size(); ++a) {
      if (digit[a] > 0) perDim[static_cast<std::size_t>(digit[a] - 1)].push_back(free[a]);
    }
    if (!forEachOrder(value, perDim, 0, visit)) break;
  }
  return out;
}

void appendUncovered(const Layout& value, const TensorSpec& spec, int rank, ByteRange range,
                     const std::vector<Layout>& candidates, std::vector<std::uint8_t>& out) {
  if (range.bytes == 0) {
    out.insert(out.end(), candidates.size(), 0);
    return;
  }
  const auto element = static_cast<std::int64_t>(dataTypeSize(spec.dtype));
  const auto first = static_cast<std::int64_t>(range.offset) / element;
  const auto last = first + static_cast<std::int64_t>(range.bytes) / element - 1;
  const Box whole = value.rankBox(rank, spec);
  const Box read = boundingBox(value.localShape(spec), first, last);
  for (const Layout& candidate : candidates) {
    const Box part = candidate.rankBox(rank, spec).relativeTo(whole.offset);
    out.push_back(part.contains(read) ? 0 : 1);
  }
}

const Layout& chooseRangeLayout(const std::vector<Layout>& candidates, const TensorSpec& spec,
                                const std::uint8_t* uncovered) {
  std::size_t best = 0;
  std::int64_t bestBytes = std::numeric_limits<std::int64_t>::max();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (uncovered[i] != 0) continue;
    const std::int64_t bytes = candidates[i].localBytes(spec);
    if (bytes < bestBytes) {
      best = i;
      bestBytes = bytes;
    }
  }
  return candidates[best];
}

}  // namespace chimera::detail
