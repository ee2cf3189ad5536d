// SPDX-License-Identifier: Apache-2.0
#include "planner/candidates.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "chimera/chain.hpp"
#include "common/check.hpp"
#include "planner/redistribute.hpp"

namespace chimera::detail {
namespace {

ProgramStep collectiveStep(PlanStep::Kind kind, AxisSet axes, ReduceOp op, int dim, Layout output,
                           std::string origin) {
  PlanStep step;
  step.kind = kind;
  step.axes = axes;
  step.op = op;
  step.dim = dim;
  step.origin = std::move(origin);
  return {std::move(step), std::move(output)};
}

// Direct ways from `from` to `to`: nothing, a local copy, a many-to-many, or a collective.
Status directOptions(const Layout& from, const Layout& to, const TensorSpec& spec, std::vector<Program>& out) {
  if (from == to) {
    out.push_back({});
    return Status::ok();
  }
  std::vector<BoxTransfer> transfers;
  CHIMERA_RETURN_IF_ERROR(manyToManyTransfers(from, to, spec, transfers));
  const bool local = std::all_of(transfers.begin(), transfers.end(), [](const BoxTransfer& t) { return t.src == t.dst; });
  PlanStep step;
  if (local) {
    step.kind = PlanStep::Kind::LocalCopy;
    step.origin = "every rank already holds what it needs: keep own part";
  } else {
    step.kind = PlanStep::Kind::ManyToMany;
    step.transfers = std::move(transfers);
    step.origin = "send each destination the intersection of its box with each source's";
  }
  out.push_back({{std::move(step), to}});
  if (local) return Status::ok();
  for (const ChainOp& op : collectivesBetween(from, to, spec)) {
    OpEffect effect;
    CHIMERA_RETURN_IF_ERROR(applyChainOp(from, op, spec, effect));
    PlanStep collective = stepForChainOp(op, effect);
    collective.origin = "the many-to-many is exactly this collective";
    out.push_back({{std::move(collective), to}});
  }
  return Status::ok();
}

}  // namespace

std::vector<Program> reductionOptions(const Layout& from, AxisSet axes, const TensorSpec& spec) {
  std::vector<Program> options;
  const Mesh& mesh = from.mesh();
  const ReduceOp op = from.partialOp();
  const std::string group = mesh.axesName(axes);
  options.push_back({collectiveStep(PlanStep::Kind::AllReduce, axes, op, 0, from.withReplicated(axes),
                                    fmt::format("reduce the partial sums over {}", group))});
  for (int dim = 0; dim < spec.rank(); ++dim) {
    Layout sharded = from.withShards(axes, dim);
    if (!sharded.validate(spec).isOk()) continue;
    options.push_back({collectiveStep(PlanStep::Kind::ReduceScatter, axes, op, dim, std::move(sharded),
                                      fmt::format("reduce over {} straight into shards of dim {}", group, dim))});
  }
  for (auto& program : hierarchicalAllReduces(from, axes, spec)) options.push_back(std::move(program));
  return options;
}

Status movementOptions(const Layout& from, const Layout& to, const TensorSpec& spec, std::vector<Program>& out) {
  std::vector<Program> options;
  CHIMERA_RETURN_IF_ERROR(directOptions(from, to, spec, options));
  const Mesh& mesh = from.mesh();
  const std::uint32_t replicated = to.axesOfKind(Placement::Kind::Replicate).bits();
  // Gather at the destination: deliver shards over a subset X of to's R axes, then AllGather(X).
  for (std::uint32_t bits = replicated; bits != 0; bits = (bits - 1) & replicated) {
    const AxisSet gather = AxisSet::fromBits(bits);
    for (int dim = 0; dim < spec.rank(); ++dim) {
      Layout sharded = to.withShards(gather, dim);
      if (!sharded.validate(spec).isOk()) continue;
      std::vector<Program> heads;
      CHIMERA_RETURN_IF_ERROR(directOptions(from, sharded, spec, heads));
      for (auto& head : heads) {
        head.push_back(collectiveStep(PlanStep::Kind::AllGather, gather, ReduceOp::Sum, dim, to,
                                      fmt::format("gather at the destination over {}", mesh.axesName(gather))));
        options.push_back(std::move(head));
      }
    }
  }
  out = std::move(options);
  return Status::ok();
}

Plan assemblePlan(const TensorSpec& spec, const Layout& from, const Layout& to, const Program& program,
                  std::int64_t scale) {
  Plan plan;
  plan.spec = spec;
  plan.addBuffer(from);
  plan.addBuffer(to);
  int current = Plan::kInput;
  for (std::size_t i = 0; i < program.size(); ++i) {
    PlanStep step = program[i].step;
    const bool last = i + 1 == program.size();
    if (last) CHIMERA_ASSERT(program[i].output == to);
    step.input = current;
    step.output = last ? Plan::kOutput : plan.addBuffer(program[i].output);
    current = step.output;
    plan.steps.push_back(std::move(step));
  }
  if (program.empty()) {
    PlanStep copy;
    copy.kind = PlanStep::Kind::LocalCopy;
    copy.input = Plan::kInput;
    copy.output = Plan::kOutput;
    copy.origin = from == to ? "the input already is the output" : "keep own part";
    plan.steps.push_back(std::move(copy));
  }
  if (scale != 1) {
    PlanStep step;
    step.kind = PlanStep::Kind::Scale;
    step.input = Plan::kOutput;
    step.output = Plan::kOutput;
    step.scale = scale;
    step.origin = "a sum over replicated copies is a multiplication";
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

}  // namespace chimera::detail
