// SPDX-License-Identifier: Apache-2.0
// Fusion rule: AllGather(A, d), then slice(A, d)  ->  local (keep own shard)
//
// What: gathering a dim and then keeping one's own shard of the same dim returns every
// rank to the data it started with; the (n-1)*L bytes of the AllGather are all wasted.
// How it falls out: the planner moves data by intersecting what each destination needs
// with what each source holds. Every rank needs only the box it already holds, so every
// transfer is local and the many-to-many becomes a LocalCopy step (no communication).
// Preconditions: the slice is over the same axes and the same dim as the AllGather.
// Worked example: tp=4, shape 4096x1024 f32, `--from tp=S0 --chain
// allgather:tp:0,slice:tp:0`: baseline 3 * 4 MiB = 12 MiB per rank; fused 0 bytes.
#include <fmt/format.h>

#include "planner/patterns/patterns.hpp"

namespace chimera::detail {

std::optional<std::string> allGatherThenOwnSlice(const PatternContext& context) {
  const Mesh& mesh = context.trace.layouts.front().mesh();
  return firstAdjacentPair(context, ChainOp::Kind::AllGather, ChainOp::Kind::Slice,
                           [&](const ChainOp& gather, const ChainOp& slice) -> std::optional<std::string> {
                             if (gather.dim != slice.dim) return std::nullopt;
                             if (planHasStep(context.fused, PlanStep::Kind::AllGather, gather.axes))
                               return std::nullopt;
                             return fmt::format("allgather:{0}:{1} then slice:{0}:{1} -> local (own shard kept)",
                                                mesh.axesName(gather.axes), gather.dim);
                           });
}

}  // namespace chimera::detail
