// SPDX-License-Identifier: Apache-2.0
// Implements the list of pattern recognisers and the helpers they share.
#include "planner/patterns/patterns.hpp"

#include <algorithm>

namespace chimera::detail {

bool planHasStep(const Plan& plan, PlanStep::Kind kind, AxisSet axes) {
  return std::any_of(plan.steps.begin(), plan.steps.end(),
                     [&](const PlanStep& s) { return s.kind == kind && s.axes == axes; });
}

bool planHasKind(const Plan& plan, PlanStep::Kind kind) {
  return std::any_of(plan.steps.begin(), plan.steps.end(), [&](const PlanStep& s) { return s.kind == kind; });
}

const PlanStep* planStepCovering(const Plan& plan, PlanStep::Kind kind, AxisSet axes) {
  const auto it = std::find_if(plan.steps.begin(), plan.steps.end(),
                               [&](const PlanStep& s) { return s.kind == kind && (s.axes & axes) == axes; });
  return it == plan.steps.end() ? nullptr : &*it;
}

std::optional<std::string> firstAdjacentPair(const PatternContext& context, ChainOp::Kind first, ChainOp::Kind second,
                                             const PairDescription& describe) {
  const auto& ops = context.trace.ops;
  for (std::size_t i = 0; i + 1 < ops.size(); ++i) {
    if (ops[i].kind != first || ops[i + 1].kind != second || ops[i].axes != ops[i + 1].axes) continue;
    if (auto description = describe(ops[i], ops[i + 1])) return description;
  }
  return std::nullopt;
}

std::vector<std::string> namedRewrites(const PatternContext& context) {
  std::vector<std::string> names;
  for (auto recognise :
       {allReduceThenSlice, allGatherThenOwnSlice, allGatherThenSliceToAllToAll, reduceScatterThenAllGather,
        mergeAllReduces, allReduceOfReplicated, pipelineHandOff, unionAllToAll}) {
    if (auto name = recognise(context)) names.push_back(std::move(*name));
  }
  return names;
}

}  // namespace chimera::detail
