// SPDX-License-Identifier: Apache-2.0
// Fusion rule: AllReduce(A), then keep own shard over A  ->  ReduceScatter(A)   (paper: TP+SP)
//
// What: a P -> R -> S(d) chain reduces every element on every rank and then throws
// (n-1)/n of the result away. Reducing straight into the shards sends half as much.
// How it falls out: the planner reduces the partial axes the consumer does not keep; a
// ReduceScatter toward dim d is one of the reduction options, and when the consumed layout
// is S(d) on A it leaves the tensor exactly where it must be, so no movement follows.
// Preconditions: A is P in the input (one reduce op); the consumer reads S(d) over A; the
// dim divides evenly by |A|.
// Worked example: tp=8, `--from tp=P --chain allreduce:tp,slice:tp:0` (or `--chain
// allreduce:tp --consume tp=S0`), 16 MiB per rank: AllReduce sends 2*7/8*16 = 28 MiB per
// rank; ReduceScatter sends 7/8*16 = 14 MiB: half.
#include <fmt/format.h>

#include "planner/patterns/patterns.hpp"

namespace chimera::detail {

std::optional<std::string> allReduceThenSlice(const PatternContext& context) {
  const auto& ops = context.trace.ops;
  const Mesh& mesh = context.trace.layouts.front().mesh();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != ChainOp::Kind::AllReduce) continue;
    const AxisSet reduced = ops[i].axes;
    const bool sliced =
        i + 1 < ops.size() && ops[i + 1].kind == ChainOp::Kind::Slice && (ops[i + 1].axes & reduced) == ops[i + 1].axes;
    const bool consumedSharded = i + 1 == ops.size();
    if (!sliced && !consumedSharded) continue;
    for (const auto& step : context.fused.steps) {
      if (step.kind == PlanStep::Kind::ReduceScatter && (step.axes & reduced) == step.axes) {
        return fmt::format("allreduce:{} then own shard -> reducescatter:{}:{}", mesh.axesName(reduced),
                           mesh.axesName(step.axes), step.dim);
      }
    }
  }
  return std::nullopt;
}

}  // namespace chimera::detail
