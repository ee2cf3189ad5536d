// SPDX-License-Identifier: Apache-2.0
// Fusion rule: ReduceScatter(A, d), then AllGather(A, d)  ->  AllReduce(A)
//
// What: the two halves of a ring AllReduce issued separately. The bytes are the same
// ((n-1)/n*L + (n-1)*L/n = 2(n-1)/n*L) but one collective saves a launch, a
// synchronisation and the intermediate buffer; a tuned AllReduce is often faster still.
// How it falls out: the target is R on A; the reduction options include AllReduce (ends
// at R, nothing to move) and ReduceScatter + gather at the destination. They tie on bytes
// and the planner breaks ties by fewer steps, so the single AllReduce wins.
// Preconditions: same axes and dim on both ops; A partial with one op.
// Worked example: tp=4, `--from tp=P --chain reducescatter:tp:0,allgather:tp:0` at
// 16 MiB per rank: both send 24 MiB per rank, the plan has one step instead of two.
#include <fmt/format.h>

#include "planner/patterns/patterns.hpp"

namespace chimera::detail {

std::optional<std::string> reduceScatterThenAllGather(const PatternContext& context) {
  const Mesh& mesh = context.trace.layouts.front().mesh();
  return firstAdjacentPair(context, ChainOp::Kind::ReduceScatter, ChainOp::Kind::AllGather,
                           [&](const ChainOp& scatter, const ChainOp& gather) -> std::optional<std::string> {
                             if (scatter.dim != gather.dim) return std::nullopt;
                             const PlanStep* step =
                                 planStepCovering(context.fused, PlanStep::Kind::AllReduce, scatter.axes);
                             if (step == nullptr) return std::nullopt;
                             return fmt::format("reducescatter:{0}:{1} then allgather:{0}:{1} -> allreduce:{2}",
                                                mesh.axesName(scatter.axes), scatter.dim, mesh.axesName(step->axes));
                           });
}

}  // namespace chimera::detail
