// SPDX-License-Identifier: Apache-2.0
// Fusion rule: a chain of collectives that only reshards  ->  one AllToAll over the union
//          group (paper rules TP+EP, SP+EP)
//
// What: SP+EP issues AllGather(sp), keeps a shard, then AllToAll(dp+sp); the net effect
// moves a split from one dim to another over the union group, which one AllToAll over
// that group does with 1/n of each rank's data per peer. TP+EP reduces first; the
// ReduceScatter then leaves shards that one smaller AllToAll redistributes.
// How it falls out: the box intersections between the source layout (after any
// reduction) and the consumed layout give every pair of ranks in the union group one
// equal-sized block, so the many-to-many collapses to an AllToAll: a plain alltoall step
// when the move is one split changing dims, else a ManyToMany marked with its AllToAll
// group (blocks packed per destination; SP+EP's split on two dims lands here).
// Preconditions: the chain has at least two communicating ops; the fused plan's only
// data movement is one AllToAll.
// Worked example (SP+EP): dp=2,sp=4, `--from dp=S0,sp=S1 --chain
// allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2`, L = local bytes: baseline 3L + 7/8 L
// per rank; fused: one alltoall over dp+sp with 7/8 L per rank (4.4x fewer bytes).
#include <fmt/format.h>

#include <algorithm>

#include "planner/patterns/patterns.hpp"

namespace chimera::detail {

std::optional<std::string> unionAllToAll(const PatternContext& context) {
  const auto& ops = context.trace.ops;
  const auto communicating =
      std::count_if(ops.begin(), ops.end(), [](const ChainOp& op) { return op.kind != ChainOp::Kind::Slice; });
  if (communicating < 2) return std::nullopt;
  const PlanStep* allToAll = nullptr;
  for (const auto& step : context.fused.steps) {
    switch (step.kind) {
      case PlanStep::Kind::AllToAll:
        if (allToAll != nullptr) return std::nullopt;
        allToAll = &step;
        break;
      case PlanStep::Kind::ManyToMany:
        if (allToAll != nullptr || step.allToAllGroup.empty()) return std::nullopt;
        allToAll = &step;
        break;
      case PlanStep::Kind::ReduceScatter:
      case PlanStep::Kind::AllReduce:
      case PlanStep::Kind::LocalCopy:
      case PlanStep::Kind::Scale: break;
      default: return std::nullopt;
    }
  }
  if (allToAll == nullptr) return std::nullopt;
  const Mesh& mesh = context.trace.layouts.front().mesh();
  if (allToAll->kind == PlanStep::Kind::ManyToMany) {
    return fmt::format("{} communicating ops reshard through one alltoall over {} (packed blocks)", communicating,
                       mesh.axesName(allToAll->allToAllGroup));
  }
  return fmt::format("{} communicating ops reshard through one alltoall:{}:{}:{}", communicating,
                     mesh.axesName(allToAll->axes), allToAll->dim, allToAll->toDim);
}

}  // namespace chimera::detail
