// SPDX-License-Identifier: Apache-2.0
// Implements the planner's candidate programs for a chain.
#include "planner/candidates.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "chimera/chain.hpp"
#include "core/check.hpp"
#include "planner/redistribute.hpp"

namespace chimera::detail {
namespace {

ProgramStep collectiveStep(PlanStep::Kind kind, AxisSet axes, ReduceOp op, int dim, Layout output, std::string origin) {
  PlanStep step;
  step.kind = kind;
  step.axes = axes;
  step.op = op;
  step.dim = dim;
  step.origin = std::move(origin);
  return {std::move(step), std::move(output)};
}

// A program of the one step `step`. (A braced `{{step, layout}}` would go through an
// initializer_list, which copies the step and its transfers.)
Program oneStep(ProgramStep step) {
  Program program;
  program.push_back(std::move(step));
  return program;
}

// Above this many transfers per rank, an explicit many-to-many that a single collective
// can replace is not built (see directOptions).
constexpr std::int64_t kTransfersPerRank = 16;

// Direct ways from `from` (the layout of `source`) to `to`: nothing, a local copy, a
// many-to-many (with the box transfers of `rank` only, unless kWorldPlan), or a collective.
Status directOptions(TransferSource& source, const Layout& from, const Layout& to, const TensorSpec& spec, int rank,
                     std::vector<Program>& out) {
  if (from == to) {
    out.push_back({});
    return Status::ok();
  }
  bool local = false;
  CHIMERA_RETURN_IF_ERROR(source.isLocal(to, local));
  if (local) {
    PlanStep step;
    step.kind = PlanStep::Kind::LocalCopy;
    step.origin = "every rank already holds what it needs: keep own part";
    out.push_back(oneStep({std::move(step), to}));
    return Status::ok();
  }
  const std::vector<ChainOp> collectives = collectivesBetween(from, to, spec);
  // An explicit many-to-many with more transfers than kTransfersPerRank per rank (an
  // all-to-all of a large group has ranks^2) is only built when no single collective does
  // the same movement: building it would make planning quadratic in the group size.
  std::int64_t count = 0;
  CHIMERA_RETURN_IF_ERROR(source.countTransfers(to, count));
  if (collectives.empty() || count <= kTransfersPerRank * from.mesh().size()) {
    PlanStep step;
    step.kind = PlanStep::Kind::ManyToMany;
    CHIMERA_RETURN_IF_ERROR(source.transfersTo(to, rank, step.transfers, step.flows));
    step.allToAllGroup = allToAllGroup(from, to, step.flows);
    step.origin = "send each destination the intersection of its box with each source's";
    out.push_back(oneStep({std::move(step), to}));
  }
  for (const ChainOp& op : collectives) {
    OpEffect effect;
    CHIMERA_RETURN_IF_ERROR(applyChainOp(from, op, spec, effect));
    PlanStep collective = stepForChainOp(op, effect);
    collective.origin = "the many-to-many is exactly this collective";
    out.push_back(oneStep({std::move(collective), to}));
  }
  return Status::ok();
}

}  // namespace

std::vector<Layout> trimsToward(const Layout& from, const Layout& to, const TensorSpec& spec) {
  std::vector<int> axes;
  std::vector<int> dims;
  for (int dim = 0; dim <= to.maxShardDim(); ++dim) {
    for (int axis : to.splitAxes(dim)) {
      if (!from.placement(axis).isReplicate()) continue;
      axes.push_back(axis);
      dims.push_back(dim);
    }
  }
  std::vector<Layout> trims;
  const auto add = [&](const Layout& layout) {
    if (layout == from || !layout.validate(spec).isOk()) return;
    if (std::find(trims.begin(), trims.end(), layout) == trims.end()) trims.push_back(layout);
  };
  if (axes.empty()) return trims;
  Layout onTargetDims = from;
  for (std::size_t i = 0; i < axes.size(); ++i) onTargetDims = onTargetDims.with(axes[i], Placement::shard(dims[i]));
  add(onTargetDims);
  for (int dim = 0; dim < spec.rank(); ++dim) {
    Layout onOneDim = from;
    for (int axis : axes) onOneDim = onOneDim.with(axis, Placement::shard(dim));
    add(onOneDim);
  }
  return trims;
}

namespace {

// Permutations of more axes than this are not searched (4! = 24 orders per dim already).
constexpr int kMaxPermutedAxes = 4;

// The axes of `axes`, ascending (mesh order).
std::vector<int> axisList(AxisSet axes, int numAxes) {
  std::vector<int> list;
  for (int axis = 0; axis < numAxes; ++axis) {
    if (axes.contains(axis)) list.push_back(axis);
  }
  return list;
}

// Every order of `axes` (the first is mesh order); mesh order alone beyond kMaxPermutedAxes.
std::vector<std::vector<int>> nestingOrders(AxisSet axes, int numAxes) {
  std::vector<int> order = axisList(axes, numAxes);
  std::vector<std::vector<int>> orders;
  if (static_cast<int>(order.size()) > kMaxPermutedAxes) return {order};
  do {
    orders.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return orders;
}

// `order` (outer first) cut into collective groups: a group nests its axes in mesh order, so
// a nesting order needs one group per maximal run that increases in mesh order (`together`),
// or one group per axis (not `together`, e.g. to reduce inside a node before across nodes).
std::vector<AxisSet> groupsOf(const std::vector<int>& order, bool together) {
  std::vector<AxisSet> groups;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (together && i > 0 && order[i] > order[i - 1]) {
      groups.back() = groups.back() | AxisSet::single(order[i]);
    } else {
      groups.push_back(AxisSet::single(order[i]));
    }
  }
  return groups;
}

// ReduceScatters over `groups` in turn, each appending its axes as the innermost splits of
// `dim`, starting from `from`. Empty when a step does not divide evenly.
Program reduceScatterSequence(const Layout& from, const std::vector<AxisSet>& groups, int dim, const TensorSpec& spec) {
  const Mesh& mesh = from.mesh();
  const ReduceOp op = from.partialOp();
  Program program;
  Layout current = from;
  for (const AxisSet group : groups) {
    Layout next = current.withShards(group, dim);
    if (!next.validate(spec).isOk()) return {};
    program.push_back(collectiveStep(
        PlanStep::Kind::ReduceScatter, group, op, dim, next,
        fmt::format("reduce over {} into shards of dim {} nested inside the previous", mesh.axesName(group), dim)));
    current = std::move(next);
  }
  return program;
}

// ReduceScatter of the reduced axes `to` shards (per dim, in dim order, nested as `to`
// nests them), then AllReduce of the rest.
Program reductionTowardTarget(const Layout& from, AxisSet axes, const Layout& to, const TensorSpec& spec) {
  const Mesh& mesh = from.mesh();
  const ReduceOp op = from.partialOp();
  Program program;
  Layout current = from;
  AxisSet rest = axes;
  for (int dim = 0; dim <= to.maxShardDim(); ++dim) {
    std::vector<int> order;  // the reduced axes splitting `dim` in `to`, outer first
    for (int axis : to.splitAxes(dim)) {
      if (axes.contains(axis)) order.push_back(axis);
    }
    if (order.empty()) continue;
    for (const AxisSet group : groupsOf(order, /*together=*/true)) {
      Layout next = current.withShards(group, dim);
      if (!next.validate(spec).isOk()) return {};
      program.push_back(collectiveStep(
          PlanStep::Kind::ReduceScatter, group, op, dim, next,
          fmt::format("reduce over {} straight into the consumer's shards of dim {}", mesh.axesName(group), dim)));
      current = std::move(next);
      rest = AxisSet::fromBits(rest.bits() & ~group.bits());
    }
  }
  if (program.empty()) return {};
  if (!rest.empty()) {
    program.push_back(collectiveStep(PlanStep::Kind::AllReduce, rest, op, 0, current.withReplicated(rest),
                                     fmt::format("reduce the rest over {} on the shards", mesh.axesName(rest))));
  }
  return program;
}

}  // namespace

std::vector<Program> reductionOptions(const Layout& from, AxisSet axes, const Layout& to, const TensorSpec& spec) {
  std::vector<Program> options;
  const Mesh& mesh = from.mesh();
  const ReduceOp op = from.partialOp();
  const std::string group = mesh.axesName(axes);
  options.push_back(oneStep(collectiveStep(PlanStep::Kind::AllReduce, axes, op, 0, from.withReplicated(axes),
                                           fmt::format("reduce the partial sums over {}", group))));
  for (int dim = 0; dim < spec.rank(); ++dim) {
    Layout sharded = from.withShards(axes, dim);
    if (!sharded.validate(spec).isOk()) continue;
    options.push_back(
        oneStep(collectiveStep(PlanStep::Kind::ReduceScatter, axes, op, dim, std::move(sharded),
                               fmt::format("reduce over {} straight into shards of dim {}", group, dim))));
  }
  // The other nesting orders of the reduced axes on each dim, and one axis per step.
  for (int dim = 0; dim < spec.rank(); ++dim) {
    const std::vector<std::vector<int>> orders = nestingOrders(axes, mesh.numAxes());
    for (std::size_t i = 0; i < orders.size(); ++i) {
      for (const bool together : {true, false}) {
        const std::vector<AxisSet> groups = groupsOf(orders[i], together);
        if (groups.size() == 1) continue;                                              // the single ReduceScatter above
        if (!together && groups.size() == groupsOf(orders[i], true).size()) continue;  // same program
        Program program = reduceScatterSequence(from, groups, dim, spec);
        if (!program.empty()) options.push_back(std::move(program));
      }
    }
  }
  Program toward = reductionTowardTarget(from, axes, to, spec);
  if (!toward.empty()) options.push_back(std::move(toward));
  for (auto& program : hierarchicalAllReduces(from, axes, spec)) options.push_back(std::move(program));
  return options;
}

std::vector<Program> reductionPrefixes(const Layout& from, const Layout& to, AxisSet reduce, const TensorSpec& spec) {
  // Start from the input, or first drop locally what no destination along the consumer's
  // shard axes needs, so that reductions and moves work on less data.
  std::vector<Program> starts{{}};
  for (const Layout& trimmed : trimsToward(from, to, spec)) {
    PlanStep slice;
    slice.kind = PlanStep::Kind::LocalCopy;
    slice.origin = "keep only the part the consumer's shards need";
    starts.push_back(oneStep({std::move(slice), trimmed}));
  }
  std::vector<Program> prefixes;
  for (const auto& start : starts) {
    if (reduce.empty()) {
      prefixes.push_back(start);
      continue;
    }
    const Layout& begin = start.empty() ? from : start.back().output;
    for (auto& option : reductionOptions(begin, reduce, to, spec)) {
      Program program = start;
      program.insert(program.end(), option.begin(), option.end());
      prefixes.push_back(std::move(program));
    }
  }
  return prefixes;
}

Status movementOptions(const Layout& from, const Layout& to, const TensorSpec& spec, int rank,
                       std::vector<Program>& out) {
  std::vector<Program> options;
  TransferSource source(from, spec);  // one index of `from` for every target below
  CHIMERA_RETURN_IF_ERROR(directOptions(source, from, to, spec, rank, options));
  const Mesh& mesh = from.mesh();
  const std::uint32_t replicated = to.axesOfKind(Placement::Kind::Replicate).bits();
  // Gather at the destination: deliver shards over a subset X of to's R axes, then AllGather(X).
  // X's axes may nest on the dim in any order: an AllGather takes the innermost mesh-ordered
  // run, so a nesting order is gathered as one AllGather per run, innermost first.
  for (std::uint32_t bits = replicated; bits != 0; bits = (bits - 1) & replicated) {
    const AxisSet gather = AxisSet::fromBits(bits);
    for (int dim = 0; dim < spec.rank(); ++dim) {
      for (const std::vector<int>& order : nestingOrders(gather, mesh.numAxes())) {
        const std::vector<AxisSet> groups = groupsOf(order, /*together=*/true);
        std::vector<Layout> layouts{to};  // layouts[k]: to with groups [0, k) appended on dim
        for (const AxisSet group : groups) layouts.push_back(layouts.back().withShards(group, dim));
        const Layout& sharded = layouts.back();
        if (!sharded.validate(spec).isOk()) continue;
        std::vector<Program> heads;
        CHIMERA_RETURN_IF_ERROR(directOptions(source, from, sharded, spec, rank, heads));
        for (auto& head : heads) {
          for (std::size_t k = groups.size(); k-- > 0;) {
            head.push_back(collectiveStep(PlanStep::Kind::AllGather, groups[k], ReduceOp::Sum, dim, layouts[k],
                                          fmt::format("gather at the destination over {}", mesh.axesName(groups[k]))));
          }
          options.push_back(std::move(head));
        }
      }
    }
  }
  out = std::move(options);
  return Status::ok();
}

Plan assemblePlan(const TensorSpec& spec, const Layout& from, const Layout& to, Program&& program, std::int64_t scale,
                  int rank) {
  Plan plan;
  plan.spec = spec;
  plan.rank = rank;
  plan.buffers.reserve(program.size() + 1);
  plan.steps.reserve(program.size() + 1);
  plan.addBuffer(from);
  plan.addBuffer(to);
  int current = Plan::kInput;
  for (std::size_t i = 0; i < program.size(); ++i) {
    PlanStep step = std::move(program[i].step);
    const bool last = i + 1 == program.size();
    if (last) CHIMERA_ASSERT(program[i].output == to);
    step.input = current;
    step.output = last ? Plan::kOutput : plan.addBuffer(program[i].output);
    current = step.output;
    plan.steps.push_back(std::move(step));
  }
  if (program.empty() && scale == 1) {
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
    step.input = program.empty() ? Plan::kInput : Plan::kOutput;
    step.output = Plan::kOutput;
    step.scale = scale;
    step.origin = "a sum over replicated copies is a multiplication";
    plan.steps.push_back(std::move(step));
  }
  return plan;
}

}  // namespace chimera::detail
