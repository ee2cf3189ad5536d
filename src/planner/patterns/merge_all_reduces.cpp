// SPDX-License-Identifier: Apache-2.0
// Fusion rule: AllReduce(A), then AllReduce(B)  ->  AllReduce(A+B), or the hierarchical form
//          ReduceScatter(A', d), AllReduce(rest) on the shard, AllGather(A', d)
//
// What: a tensor partial over both A and B reduced in two passes sends
// 2(a-1)/a*L + 2(b-1)/b*L per rank; one AllReduce over the flattened group sends
// 2(ab-1)/(ab)*L, less as soon as both groups have more than one rank. The hierarchical
// form sends the same bytes as the flat one, 2(a-1)/a*L + 2(b-1)/(ab)*L, but keeps the
// full-size traffic on A's links and only 1/a of it on B's, which wins when B's links are
// slower (across nodes or NUMA halves): a topology-aware cost model decides.
// How it falls out: the planner reduces every partial axis the consumer does not keep in
// one reduction over the union group; this file adds the hierarchical programs to the
// reduction options. Priced by bytes alone they tie with the flat AllReduce and lose the
// tie on step count, so `bytes` picks the flat form.
// Preconditions: A and B disjoint, both partial with the same op.
// Worked example: dp=2,tp=4, `--from dp=P,tp=P --chain allreduce:tp,allreduce:dp` at
// 16 MiB: baseline 24 + 16 = 40 MiB per rank; allreduce:dp+tp sends 2*7/8*16 = 28 MiB.
#include <fmt/format.h>

#include "planner/candidates.hpp"
#include "planner/patterns/patterns.hpp"

namespace chimera::detail {

std::vector<Program> hierarchicalAllReduces(const Layout& from, AxisSet axes, const TensorSpec& spec) {
  std::vector<Program> programs;
  const Mesh& mesh = from.mesh();
  const ReduceOp op = from.partialOp();
  const std::uint32_t all = axes.bits();
  const Layout reduced = from.withReplicated(axes);
  for (std::uint32_t bits = (all - 1) & all; bits != 0; bits = (bits - 1) & all) {
    const AxisSet outer = AxisSet::fromBits(bits);
    const AxisSet inner = AxisSet::fromBits(all & ~bits);
    for (int dim = 0; dim < spec.rank(); ++dim) {
      Layout sharded = from.withShards(outer, dim);
      if (!sharded.validate(spec).isOk()) continue;
      const Layout shardReduced = sharded.withReplicated(inner);
      const std::string why =
          fmt::format("hierarchical reduction over {} then {}", mesh.axesName(outer), mesh.axesName(inner));
      Program program(3);
      program[0].step.kind = PlanStep::Kind::ReduceScatter;
      program[0].step.axes = outer;
      program[0].step.op = op;
      program[0].step.dim = dim;
      program[0].step.origin = why;
      program[0].output = sharded;
      program[1].step.kind = PlanStep::Kind::AllReduce;
      program[1].step.axes = inner;
      program[1].step.op = op;
      program[1].step.origin = why;
      program[1].output = shardReduced;
      program[2].step.kind = PlanStep::Kind::AllGather;
      program[2].step.axes = outer;
      program[2].step.dim = dim;
      program[2].step.origin = why;
      program[2].output = reduced;
      programs.push_back(std::move(program));
    }
  }
  return programs;
}

std::optional<std::string> mergeAllReduces(const PatternContext& context) {
  const auto& trace = context.trace;
  const Mesh& mesh = trace.layouts.front().mesh();
  for (std::size_t i = 0; i + 1 < trace.ops.size(); ++i) {
    const ChainOp& first = trace.ops[i];
    const ChainOp& second = trace.ops[i + 1];
    if (first.kind != ChainOp::Kind::AllReduce || second.kind != ChainOp::Kind::AllReduce) continue;
    if (!(first.axes & second.axes).empty()) continue;
    const AxisSet both = first.axes | second.axes;
    const std::string before =
        fmt::format("allreduce:{} then allreduce:{}", mesh.axesName(first.axes), mesh.axesName(second.axes));
    for (const auto& step : context.fused.steps) {
      if (step.kind == PlanStep::Kind::AllReduce && (step.axes & both) == both) {
        return fmt::format("{} -> allreduce:{}", before, mesh.axesName(step.axes));
      }
    }
    if (planHasKind(context.fused, PlanStep::Kind::ReduceScatter) &&
        planHasKind(context.fused, PlanStep::Kind::AllReduce)) {
      return before + " -> hierarchical reducescatter/allreduce/allgather";
    }
  }
  return std::nullopt;
}

}  // namespace chimera::detail
