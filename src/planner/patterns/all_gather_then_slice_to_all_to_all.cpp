// SPDX-License-Identifier: Apache-2.0
// Fusion rule: AllGather(A, d), then slice(A, e) with e != d  ->  AllToAll(A, d, e)
//
// What: gathering dim d and then keeping one's shard of another dim e moves the split from
// d to e. Each rank needs from each peer only the peer's d-shard restricted to its own
// e-shard: 1/n of what the AllGather delivers.
// How it falls out: the intersection of what rank j needs (all of d, shard j of e) with
// what rank i holds (shard i of d) is one block per pair, the same size for every pair:
// exactly the transfers of an AllToAll, so the many-to-many collapses to that collective.
// Preconditions: A is the innermost split of d before the AllGather; e divides by |A|.
// Worked example: sp=4, shape 4096x1024 f32, `--from sp=S0 --chain
// allgather:sp:0,slice:sp:1`: baseline AllGather 3 * 4 MiB = 12 MiB per rank; fused
// AllToAll 3/4 * 4 MiB = 3 MiB per rank (4x fewer).
#include <fmt/format.h>

#include "planner/patterns/patterns.hpp"

namespace chimera::detail {

std::optional<std::string> allGatherThenSliceToAllToAll(const PatternContext& context) {
  const Mesh& mesh = context.trace.layouts.front().mesh();
  return firstAdjacentPair(
      context, ChainOp::Kind::AllGather, ChainOp::Kind::Slice,
      [&](const ChainOp& gather, const ChainOp& slice) -> std::optional<std::string> {
        if (gather.dim == slice.dim) return std::nullopt;
        const PlanStep* step = planStepCovering(context.fused, PlanStep::Kind::AllToAll, gather.axes);
        if (step == nullptr) return std::nullopt;
        return fmt::format("allgather:{0}:{1} then slice:{0}:{2} -> alltoall:{3}:{4}:{5}", mesh.axesName(gather.axes),
                           gather.dim, slice.dim, mesh.axesName(step->axes), step->dim, step->toDim);
      });
}

}  // namespace chimera::detail
