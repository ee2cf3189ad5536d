// SPDX-License-Identifier: Apache-2.0
// Named rewrites (private). The planner has one mechanism (reduce partials where cheapest,
// move boxes by intersection, gather at the destination if cheaper); the rewrites the
// paper names are what that mechanism produces on particular chains. Each
// file here documents one rewrite (what, preconditions, worked example) and recognises
// it: given a traced chain and the fused plan, it returns a one-line description when
// the chain holds the pattern and the fused plan applies the rewrite. `explain` lists them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/plan.hpp"

namespace chimera::detail {

/// What a recogniser looks at.
struct RewriteContext {
  const ChainTrace& trace;  ///< the chain and its layouts
  const Plan& fused;        ///< the plan the mechanism chose
};

/// True when `plan` has a step of `kind` over exactly `axes`.
bool planHasStep(const Plan& plan, PlanStep::Kind kind, AxisSet axes);
/// True when `plan` has a step of `kind` (any group).
bool planHasKind(const Plan& plan, PlanStep::Kind kind);

/// AllReduce(A) then keep own shard of A -> ReduceScatter(A) (paper rule TP+SP).
std::optional<std::string> allReduceThenSlice(const RewriteContext& context);
/// AllGather(A, d) then own slice (A, d) -> local.
std::optional<std::string> allGatherThenOwnSlice(const RewriteContext& context);
/// AllGather(A, d) then slice(A, e) -> AllToAll(A, d, e).
std::optional<std::string> allGatherThenSliceToAllToAll(const RewriteContext& context);
/// ReduceScatter(A, d) then AllGather(A, d) -> AllReduce(A).
std::optional<std::string> reduceScatterThenAllGather(const RewriteContext& context);
/// AllReduce(A) then AllReduce(B) -> AllReduce(A+B) or the hierarchical form.
std::optional<std::string> mergeAllReduces(const RewriteContext& context);
/// AllReduce(sum) over replicated axes -> local scale.
std::optional<std::string> allReduceOfReplicated(const RewriteContext& context);
/// A stage hand-off (send) next to a collective -> the stage link carries only needed
/// shards (paper rules TP+PP, PP+SP, PP+EP).
std::optional<std::string> pipelineHandOff(const RewriteContext& context);
/// Reshard through AllToAll over a union group (paper rules TP+EP, SP+EP).
std::optional<std::string> unionAllToAll(const RewriteContext& context);

/// Every recognised rewrite, in the order above.
std::vector<std::string> namedRewrites(const RewriteContext& context);

}  // namespace chimera::detail
