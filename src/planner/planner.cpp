// SPDX-License-Identifier: Apache-2.0
// Implements the planner: trace the chain, price the candidates, decide, explain.
#include "chimera/planning/planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <tuple>

#include "core/check.hpp"
#include "core/checked_math.hpp"
#include "planner/byte_formulas.hpp"
#include "planner/candidates.hpp"
#include "planner/patterns/patterns.hpp"
#include "planner/redistribute.hpp"

namespace chimera {
namespace {

// Lexicographic order of a priced candidate: cost, tie-break, fewer bytes through local
// passes (packs, unpacks, copies: what a cost without a memory model, bytes alone, does not
// price), fewer steps, fewer messages.
struct Score {
  double value = 0;
  double tieBreak = 0;
  std::uint64_t localBytes = 0;
  std::size_t steps = 0;
  std::int64_t messages = 0;
  bool operator<(const Score& o) const {
    return std::tie(value, tieBreak, localBytes, steps, messages) <
           std::tie(o.value, o.tieBreak, o.localBytes, o.steps, o.messages);
  }
};

// The point-to-point messages of the plan's ManyToMany steps (as planBytes counts them).
std::int64_t messagesOf(const Plan& plan) {
  std::int64_t messages = 0;
  for (const auto& step : plan.steps) {
    if (step.kind != PlanStep::Kind::ManyToMany) continue;
    for (const auto& f : step.flows) messages += f.src != f.dst ? 1 : 0;
  }
  return messages;
}

Score scoreOf(const Plan& plan, const PlanCost& cost) {
  const CostPrediction p = cost.predict(plan);
  return {p.value, p.tieBreak, planLocalBytes(plan), plan.steps.size(), messagesOf(plan)};
}

Status checkReachable(const Layout& from, const Layout& to) {
  const Mesh& mesh = from.mesh();
  CHIMERA_CHECK_ARG(mesh.axesEqual(to.mesh()), "layouts are on different meshes ({} vs {})", mesh.toString(),
                    to.mesh().toString());
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    const Placement& f = from.placement(axis);
    const Placement& t = to.placement(axis);
    CHIMERA_CHECK_ARG(!t.isPartial() || (f.isPartial() && f.op == t.op),
                      "target layout {} is {} on {}, which cannot be produced from {}", to.toString(), t.toString(),
                      mesh.axis(axis).name, from.toString());
  }
  return Status::ok();
}

std::string formatBytes(std::int64_t bytes) {
  if (bytes >= (1LL << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / 1048576.0);
  if (bytes >= (1LL << 10)) return fmt::format("{:.2f} KiB", static_cast<double>(bytes) / 1024.0);
  return fmt::format("{} B", bytes);
}

// Why the chain as written was kept.
std::string noFusion(const ChainPlan& p, const PlanCost& cost) {
  const double gain = 1.0 - p.fusedCost.value / p.baselineCost.value;
  if (p.baselineCost.value > 0 && gain > 0) {
    return fmt::format("baseline, fusion's predicted gain of {:.1f}% is within the cost's margin of {:.0f}%",
                       100.0 * gain, 100.0 * cost.fusionMargin());
  }
  return "baseline, fusion predicts no gain";
}

std::string explainDecision(const ChainPlan& p, const PlanCost& cost) {
  std::string text = fmt::format(
      "Baseline sends {} in total ({} max per rank); the best of {} candidate programs sends {} ({} max per rank). ",
      formatBytes(p.baselineBytes.total), formatBytes(p.baselineBytes.maxPerRank), p.candidates,
      formatBytes(p.fusedBytes.total), formatBytes(p.fusedBytes.maxPerRank));
  text += fmt::format("Decision by the '{}' cost ({}; baseline {}, fused {}): {}.", cost.name(),
                      cost.name() == "bytes" ? "bytes alone, no topology model" : "topology model",
                      p.baselineCost.summary, p.fusedCost.summary,
                      p.useFused ? "fused, predicted cheaper (or as cheap in fewer steps)" : noFusion(p, cost));
  if (!p.rewrites.empty()) {
    text += " Rewrites:";
    for (const auto& r : p.rewrites) text += " " + r + ";";
    text.pop_back();
    text += '.';
  }
  return text;
}

}  // namespace

CostPrediction BytesCost::predict(const Plan& plan) const {
  // planBytes' total and maxPerRank, without its per-step vectors: this prices every candidate.
  std::vector<std::int64_t> perRank(static_cast<std::size_t>(plan.buffers.front().layout.mesh().size()), 0);
  for (const auto& step : plan.steps) detail::addStepBytes(plan, step, perRank);
  std::int64_t total = 0;
  std::int64_t maxPerRank = 0;
  for (auto b : perRank) {
    total += b;
    maxPerRank = std::max(maxPerRank, b);
  }
  return {static_cast<double>(total), static_cast<double>(maxPerRank),
          fmt::format("{} B total, {} B max per rank", total, maxPerRank)};
}

namespace {

// Plans count bytes in int64: every rank sends at most twice the tensor per step, and a plan
// has at most `ops` + kStepSlack steps, so the totals fit when bytes x ranks x 2 x steps does.
constexpr std::int64_t kStepSlack = 64;

Status checkPlannable(const TensorSpec& spec, const Mesh& mesh, std::size_t ops) {
  std::int64_t bytes = 1;
  for (const std::int64_t extent : spec.shape) {
    CHIMERA_CHECK_ARG(extent >= 1 && detail::checkedMul(bytes, extent, bytes), "shape {} has too many elements",
                      spec.toString());
  }
  std::int64_t total = 0;
  const bool fits = detail::checkedMul(bytes, static_cast<std::int64_t>(dataTypeSize(spec.dtype)), bytes) &&
                    detail::checkedMul(bytes, static_cast<std::int64_t>(mesh.size()) * 2, total) &&
                    detail::checkedMul(total, static_cast<std::int64_t>(ops) + kStepSlack, total);
  CHIMERA_CHECK_ARG(fits, "tensor {} over {} ranks and {} ops is too large: its byte counts overflow 64 bits",
                    spec.toString(), mesh.size(), ops);
  return Status::ok();
}

Status checkRank(const Mesh& mesh, int rank) {
  CHIMERA_CHECK_ARG(rank == kWorldPlan || (rank >= 0 && rank < mesh.size()),
                    "cannot plan for rank {}: the mesh {} has ranks 0..{}", rank, mesh.toString(), mesh.size() - 1);
  return Status::ok();
}

}  // namespace

Status planRedistribution(const TensorSpec& spec, const Layout& from, const Layout& to, std::int64_t scale,
                          const PlanCost& cost, Plan& out, int* candidates, int rank) {
  CHIMERA_RETURN_IF_ERROR(checkPlannable(spec, from.mesh(), 0));
  CHIMERA_RETURN_IF_ERROR(checkRank(from.mesh(), rank));
  CHIMERA_RETURN_IF_ERROR(from.validate(spec));
  CHIMERA_RETURN_IF_ERROR(to.validate(spec));
  CHIMERA_RETURN_IF_ERROR(checkReachable(from, to));
  CHIMERA_CHECK_ARG(scale >= 1, "scale {} must be >= 1", scale);
  CHIMERA_RETURN_IF_ERROR(cost.checkMesh(from.mesh()));
  const AxisSet partial = from.axesOfKind(Placement::Kind::Partial);
  const AxisSet kept = to.axesOfKind(Placement::Kind::Partial);
  const AxisSet reduce = AxisSet::fromBits(partial.bits() & ~kept.bits());
  const std::vector<detail::Program> reductions = detail::reductionPrefixes(from, to, reduce, spec);
  const auto reducedBy = [&](std::size_t i) -> const Layout& {
    return reductions[i].empty() ? from : reductions[i].back().output;
  };
  // Prefixes ending in the same layout (a ReduceScatter and the reduction toward `to` often
  // do) share one movementOptions: the first computes it and keeps a copy for the others.
  std::vector<std::vector<detail::Program>> shared(reductions.size());
  std::optional<Plan> best;
  Score bestScore;
  int priced = 0;
  for (std::size_t i = 0; i < reductions.size(); ++i) {
    std::size_t first = 0;
    while (!(reducedBy(first) == reducedBy(i))) ++first;
    std::vector<detail::Program> moves;
    if (first < i) {
      moves = shared[first];
    } else {
      CHIMERA_RETURN_IF_ERROR(detail::movementOptions(reducedBy(i), to, spec, rank, moves));
      for (std::size_t j = i + 1; j < reductions.size(); ++j) {
        if (reducedBy(j) == reducedBy(i)) {
          shared[i] = moves;
          break;
        }
      }
    }
    for (auto& move : moves) {
      detail::Program program;
      program.reserve(reductions[i].size() + move.size());
      program.insert(program.end(), reductions[i].begin(), reductions[i].end());
      program.insert(program.end(), std::make_move_iterator(move.begin()), std::make_move_iterator(move.end()));
      Plan plan = detail::assemblePlan(spec, from, to, std::move(program), scale, rank);
      const Score score = scoreOf(plan, cost);
      ++priced;
      if (!best || score < bestScore) {
        best = std::move(plan);
        bestScore = score;
      }
    }
  }
  CHIMERA_ASSERT(best.has_value());
  if (candidates != nullptr) *candidates = priced;
  out = std::move(*best);
  return Status::ok();
}

namespace {

// The chain as written, for a traced, non-empty chain whose result `consumed` can read, as
// the plan of `rank` (its steps hold no transfers, so every rank's is the world plan).
Plan writtenPlan(const TensorSpec& spec, const ChainTrace& trace, const Layout& consumed, int rank) {
  const Mesh& mesh = consumed.mesh();
  detail::Program program;
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    PlanStep step = detail::stepForChainOp(trace.ops[i], trace.effects[i]);
    step.origin = "as written: " + trace.ops[i].toString(mesh);
    program.push_back({std::move(step), trace.layouts[i + 1]});
  }
  if (!(trace.final() == consumed)) {
    PlanStep copy;
    copy.kind = PlanStep::Kind::LocalCopy;
    copy.origin = "the consumer reads " + consumed.toString();
    program.push_back({std::move(copy), consumed});
  }
  // Scales are part of the ops' definitions here (a sum over replicated copies).
  return detail::assemblePlan(spec, trace.layouts.front(), consumed, std::move(program), 1, rank);
}

constexpr const char* kUntraced = "baseline needs a traced, non-empty chain";

}  // namespace

namespace {

bool cheaper(const Plan& a, const CostPrediction& pa, const Plan& b, const CostPrediction& pb) {
  return std::make_tuple(pa.value, pa.tieBreak, planLocalBytes(a), a.steps.size()) <
         std::make_tuple(pb.value, pb.tieBreak, planLocalBytes(b), b.steps.size());
}

}  // namespace

bool predictedCheaper(const Plan& a, const Plan& b, const PlanCost& cost) {
  return cheaper(a, cost.predict(a), b, cost.predict(b));
}

namespace {

bool pays(const Plan& fused, const CostPrediction& f, const Plan& written, const CostPrediction& w, double margin) {
  return cheaper(fused, f, written, w) && gainClearsMargin(f.value, w.value, margin);
}

}  // namespace

bool gainClearsMargin(double fused, double written, double margin) { return fused <= (1.0 - margin) * written; }

bool fusionPays(const Plan& fused, const Plan& written, const PlanCost& cost) {
  return pays(fused, cost.predict(fused), written, cost.predict(written), cost.fusionMargin());
}

Status baselinePlan(const TensorSpec& spec, const ChainTrace& trace, const Layout& consumed, Plan& out) {
  CHIMERA_CHECK_ARG(!trace.ops.empty() && trace.layouts.size() == trace.ops.size() + 1, "{}", kUntraced);
  CHIMERA_RETURN_IF_ERROR(checkConsumable(trace.final(), consumed, spec));
  out = writtenPlan(spec, trace, consumed, kWorldPlan);
  return Status::ok();
}

Status planChain(const TensorSpec& spec, const Layout& from, const Chain& chain, const std::optional<Layout>& consumed,
                 const PlanCost& cost, ChainPlan& out, int rank) {
  ChainPlan result;
  CHIMERA_RETURN_IF_ERROR(checkPlannable(spec, from.mesh(), chain.ops.size()));
  CHIMERA_RETURN_IF_ERROR(checkRank(from.mesh(), rank));
  CHIMERA_RETURN_IF_ERROR(traceChain(from, chain, spec, result.trace));
  result.consumed = consumed.value_or(result.trace.final());
  CHIMERA_RETURN_IF_ERROR(checkConsumable(result.trace.final(), result.consumed, spec));
  // baselinePlan's checks, without checking consumability a second time.
  CHIMERA_CHECK_ARG(!result.trace.ops.empty(), "{}", kUntraced);
  result.baseline = writtenPlan(spec, result.trace, result.consumed, rank);
  CHIMERA_RETURN_IF_ERROR(planRedistribution(spec, from, result.consumed, result.trace.scale, cost, result.fused,
                                             &result.candidates, rank));
  // The chain as written is a candidate too, so the chosen plan never costs more than it.
  ++result.candidates;
  if (scoreOf(result.baseline, cost) < scoreOf(result.fused, cost)) result.fused = result.baseline;
  result.baselineBytes = planBytes(result.baseline);
  result.fusedBytes = planBytes(result.fused);
  result.baselineCost = cost.predict(result.baseline);
  result.fusedCost = cost.predict(result.fused);
  // A decision between unpriced plans would be arbitrary: say why they were not priced.
  CHIMERA_CHECK_ARG(std::isfinite(result.baselineCost.value) && std::isfinite(result.fusedCost.value),
                    "the '{}' cost cannot price these plans (baseline: {}; fused: {})", cost.name(),
                    result.baselineCost.summary, result.fusedCost.summary);
  // Fuse only on a predicted gain beyond the cost's margin; with no margin, equal cost with
  // fewer local bytes, then fewer steps, counts.
  result.useFused = pays(result.fused, result.fusedCost, result.baseline, result.baselineCost, cost.fusionMargin());
  result.rewrites = detail::namedRewrites({result.trace, result.fused});
  result.explain = explainDecision(result, cost);
  out = std::move(result);
  return Status::ok();
}

}  // namespace chimera
