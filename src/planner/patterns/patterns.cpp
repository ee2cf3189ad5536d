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
