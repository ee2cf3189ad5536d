// SPDX-License-Identifier: Apache-2.0
// Pattern recognisers (private): they name, they do not rewrite. The planner has one
// mechanism (candidates.cpp, redistribute.cpp: reduce partials where cheapest, move boxes by
// intersection, gather at the destination if cheaper); the fusion rules of the paper are what
// that mechanism produces on particular chains. Each file here documents one rule (what,
// preconditions, worked example) and recognises it: given a traced chain and the chosen
// plan, it returns a one-line description when the chain holds the pattern and the plan
// applies the rule. `explain` and ChainPlan::rewrites list them.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/planning/plan.hpp"

namespace chimera::detail {

/// What a recogniser looks at.
struct PatternContext {
  const ChainTrace& trace;  ///< the chain and its layouts
  const Plan& fused;        ///< the plan the mechanism chose
};

/// True when `plan` has a step of `kind` over exactly `axes`.
bool planHasStep(const Plan& plan, PlanStep::Kind kind, AxisSet axes);
/// True when `plan` has a step of `kind` (any group).
bool planHasKind(const Plan& plan, PlanStep::Kind kind);
/// The first step of `plan` of `kind` whose group holds every axis of `axes`; nullptr when none.
const PlanStep* planStepCovering(const Plan& plan, PlanStep::Kind kind, AxisSet axes);

/// What a recogniser of two adjacent ops says of one pair: a description, or nothing.
using PairDescription = std::function<std::optional<std::string>(const ChainOp& first, const ChainOp& second)>;
/// The first description `describe` gives for two adjacent ops of the chain of kinds `first`
/// then `second` over the same group.
std::optional<std::string> firstAdjacentPair(const PatternContext& context, ChainOp::Kind first, ChainOp::Kind second,
                                             const PairDescription& describe);

/// AllReduce(A) then keep own shard of A -> ReduceScatter(A) (paper rule TP+SP).
std::optional<std::string> allReduceThenSlice(const PatternContext& context);
/// AllGather(A, d) then own slice (A, d) -> local.
std::optional<std::string> allGatherThenOwnSlice(const PatternContext& context);
/// AllGather(A, d) then slice(A, e) -> AllToAll(A, d, e).
std::optional<std::string> allGatherThenSliceToAllToAll(const PatternContext& context);
/// ReduceScatter(A, d) then AllGather(A, d) -> AllReduce(A).
std::optional<std::string> reduceScatterThenAllGather(const PatternContext& context);
/// AllReduce(A) then AllReduce(B) -> AllReduce(A+B) or the hierarchical form.
std::optional<std::string> mergeAllReduces(const PatternContext& context);
/// AllReduce(sum) over replicated axes -> local scale.
std::optional<std::string> allReduceOfReplicated(const PatternContext& context);
/// A stage hand-off (send) next to a collective -> the stage link carries only needed
/// shards (paper rules TP+PP, PP+SP, PP+EP).
std::optional<std::string> pipelineHandOff(const PatternContext& context);
/// Reshard through AllToAll over a union group (paper rules TP+EP, SP+EP).
std::optional<std::string> unionAllToAll(const PatternContext& context);

/// Every recognised rewrite, in the order above.
std::vector<std::string> namedRewrites(const PatternContext& context);

}  // namespace chimera::detail
