// SPDX-License-Identifier: Apache-2.0
// Fusion rule: AllReduce(sum) of a tensor replicated over A  ->  local scale by |A|
//
// What: summing n identical copies multiplies by n; max, min and avg of identical copies
// change nothing. No byte needs to move.
// How it falls out: applying the op records a value factor (n for sum over R axes, 1 for
// max/min/avg) and leaves the layout R; the planner sees no partial axis to reduce, moves
// nothing, and appends one Scale step for the product of the factors.
// Preconditions: every axis of A is R (axes that are P are reduced as usual); prod over
// replicated axes is rejected (it would be a power, not a scale).
// Worked example: tp=4, `--from tp=R --chain allreduce:tp` at 16 MiB: baseline 24 MiB
// per rank, fused 0 bytes and a multiply by 4.
#include <fmt/format.h>

#include "planner/patterns/patterns.hpp"

namespace chimera::detail {

std::optional<std::string> allReduceOfReplicated(const PatternContext& context) {
  const auto& trace = context.trace;
  const Mesh& mesh = trace.layouts.front().mesh();
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    const ChainOp& op = trace.ops[i];
    if (op.kind != ChainOp::Kind::AllReduce) continue;
    const AxisSet replicated = trace.layouts[i].axesOfKind(Placement::Kind::Replicate) & op.axes;
    if (replicated.empty() || planHasStep(context.fused, PlanStep::Kind::AllReduce, op.axes)) continue;
    if (trace.effects[i].scale > 1) {
      return fmt::format("allreduce(sum) over replicated {} -> local scale x{}", mesh.axesName(replicated),
                         trace.effects[i].scale);
    }
    return fmt::format("allreduce({}) over replicated {} -> nothing (identical copies)",
                       reduceOpName(trace.effects[i].op), mesh.axesName(replicated));
  }
  return std::nullopt;
}

}  // namespace chimera::detail
