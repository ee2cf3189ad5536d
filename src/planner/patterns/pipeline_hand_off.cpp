// SPDX-License-Identifier: Apache-2.0
// Fusion rule: a stage hand-off next to a collective  ->  only needed shards cross the stage
//          link (paper rules TP+PP, PP+SP, PP+EP)
//
// What: `send:pp` copies every rank's full local buffer to the next stage. When the
// buffer was just AllReduced (TP+PP), just AllGathered (PP+SP), or is AllToAll'd right
// after (PP+EP), most of those bytes are either replicas or land on the wrong rank.
// How it falls out: the planner sees one redistribution from the source stage's layout to
// the consumed layout on the next stage. Partials are reduced first where cheapest (a
// ReduceScatter on the source stage), the stage link then carries each destination's
// intersection with each source (a many-to-many of 1/T shards), and an AllGather on the
// receiving stage runs only if that is cheaper than multicasting across the link.
// Preconditions: the chain has a send; the consumer's stage is the chain's final stage.
// Worked example (TP+PP): pp=2,tp=4, `--from pp=@0,tp=P --chain allreduce:tp,send:pp
// --consume pp=@1,tp=R`, L = local tensor: baseline AllReduce 4*1.5L + send 4L = 10L in
// total; fused ReduceScatter 4*0.75L + many-to-many 4*0.25L + AllGather 4*0.75L = 7L.
#include <fmt/format.h>

#include <numeric>

#include "planner/patterns/patterns.hpp"

namespace chimera::detail {
namespace {

bool crossesStages(const Layout& in, const Layout& out) {
  return in.axesOfKind(Placement::Kind::Stage) != out.axesOfKind(Placement::Kind::Stage) ||
         !(in.holders() == out.holders());
}

}  // namespace

std::optional<std::string> pipelineHandOff(const PatternContext& context) {
  const auto& trace = context.trace;
  const Plan& fused = context.fused;
  const TensorSpec& spec = fused.spec;
  std::int64_t chainLink = 0;
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    if (trace.ops[i].kind != ChainOp::Kind::Send) continue;
    chainLink += trace.layouts[i].localBytes(spec) * static_cast<std::int64_t>(trace.layouts[i].holders().size());
  }
  if (chainLink == 0) return std::nullopt;
  std::int64_t fusedLink = 0;
  for (const auto& step : fused.steps) {
    const Layout& in = fused.buffers[static_cast<std::size_t>(step.input)].layout;
    const Layout& out = fused.buffers[static_cast<std::size_t>(step.output)].layout;
    if (!crossesStages(in, out)) continue;
    const auto bytes = stepBytesPerRank(fused, step);
    fusedLink += std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0});
  }
  if (fusedLink >= chainLink) return std::nullopt;
  return fmt::format("stage hand-off carries {} B instead of {} B (only the shards each receiver needs)", fusedLink,
                     chainLink);
}

}  // namespace chimera::detail
