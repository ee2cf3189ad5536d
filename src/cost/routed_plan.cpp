// SPDX-License-Identifier: Apache-2.0
// The fusion rules of the routed exchange, priced. Each rule is a choice between two
// programs of expected transfers (uniform routing, or the caller's expected distinct ranks);
// it is taken only when the program with it is predicted strictly cheaper.
#include "chimera/planning/routed_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/check.hpp"

namespace chimera {
namespace {

// Bytes world rank `rank` sends in `step` (the formulas of docs/planner.md section 3).
double rankBytes(const CommStep& step, int rank) {
  if (step.kind == StepKind::ManyToMany) {
    double bytes = 0;
    for (const Transfer& t : step.transfers) {
      if (t.src == rank && t.dst != rank) bytes += static_cast<double>(t.bytes);
    }
    return bytes;
  }
  for (const std::vector<int>& group : step.groups) {
    if (std::find(group.begin(), group.end(), rank) == group.end()) continue;
    const double n = static_cast<double>(group.size());
    const double l = static_cast<double>(step.bytesPerRank);
    switch (step.kind) {
      case StepKind::AllReduce: return 2 * (n - 1) / n * l;
      case StepKind::ReduceScatter:
      case StepKind::AllToAll: return (n - 1) / n * l;
      case StepKind::AllGather: return (n - 1) * l;
      default: return l;
    }
  }
  return 0;
}

double busiestBytes(const CommProgram& program, int worldSize) {
  double most = 0;
  for (int r = 0; r < worldSize; ++r) {
    double bytes = 0;
    for (const CommStep& step : program) bytes += rankBytes(step, r);
    most = std::max(most, bytes);
  }
  return most;
}

// Every group along `axes`, each ordered by group index.
std::vector<std::vector<int>> allGroups(const Mesh& mesh, AxisSet axes) {
  std::map<int, std::vector<int>> byColor;
  for (int r = 0; r < mesh.size(); ++r) {
    const int color = mesh.groupColor(r, axes);
    if (!byColor.contains(color)) byColor[color] = mesh.groupRanks(r, axes);
  }
  std::vector<std::vector<int>> groups;
  for (auto& [color, ranks] : byColor) groups.push_back(std::move(ranks));
  return groups;
}

struct Shape {
  double tokens = 0;           // tokens each rank dispatches
  double recordsPerToken = 0;  // records per token per destination (K/R per expert, D/R per rank)
  double headerBytes = 0;      // header bytes of one record
};

// The dispatch and combine of `shape` over `group`: a count exchange, the records out, the rows back.
void appendExchange(const RoutedRequest& request, const Shape& shape, CommProgram& program) {
  const double rowBytes = static_cast<double>(request.hidden) * static_cast<double>(dataTypeSize(request.dtype));
  const int ranks = request.mesh.groupSize(request.group);
  program.push_back(CommStep::collective(StepKind::AllToAll, allGroups(request.mesh, request.group),
                                         static_cast<std::uint64_t>(4 * ranks)));
  std::vector<Transfer> out, back;
  for (int src = 0; src < request.mesh.size(); ++src) {
    for (int dst : request.mesh.groupRanks(src, request.group)) {
      const double records = shape.tokens * shape.recordsPerToken;
      out.push_back({src, dst, static_cast<std::uint64_t>(std::llround(records * (rowBytes + shape.headerBytes)))});
      back.push_back({dst, src, static_cast<std::uint64_t>(std::llround(records * rowBytes))});
    }
  }
  // Both sides pass every record once more (pack at the source, expansion at the receiver).
  const auto local = static_cast<std::uint64_t>(shape.tokens * shape.recordsPerToken * ranks * rowBytes);
  CommStep dispatch = CommStep::manyToMany(std::move(out));
  dispatch.localBytes = 2 * local;
  dispatch.localLaunches = 2;
  CommStep combine = CommStep::manyToMany(std::move(back));
  combine.localBytes = 2 * local;
  combine.localLaunches = 2;
  program.push_back(std::move(dispatch));
  program.push_back(std::move(combine));
}

Status price(const RoutedRequest& request, const CostModel* model, RoutedCandidate& candidate) {
  candidate.bytesPerRank = static_cast<std::uint64_t>(busiestBytes(candidate.program, request.mesh.size()));
  if (model == nullptr) {
    candidate.seconds = static_cast<double>(candidate.bytesPerRank);
    return Status::ok();
  }
  return model->predict(candidate.program, candidate.seconds);
}

// The program with (`oncePerRank`, `split`).
Status build(const RoutedRequest& request, double distinct, bool oncePerRank, bool split, const CostModel* model,
             RoutedCandidate& out) {
  const int ranks = request.mesh.groupSize(request.group);
  const double rowBytes = static_cast<double>(request.hidden) * static_cast<double>(dataTypeSize(request.dtype));
  const double slots =
      oncePerRank ? static_cast<double>(std::min<std::int64_t>(request.topK, request.experts / ranks)) : 1.0;
  const double tp = static_cast<double>(request.mesh.groupSize(request.tokenAxes));
  const bool replicated = request.placement != TokenPlacement::Owned;
  Shape shape;
  shape.tokens = static_cast<double>(request.tokens) / (replicated && split ? tp : 1.0);
  shape.recordsPerToken = (oncePerRank ? distinct : static_cast<double>(request.topK)) / ranks;
  shape.headerBytes = slots * (4.0 + static_cast<double>(dataTypeSize(request.weightDtype)));
  out = {};
  out.name = fmt::format("{}{}", oncePerRank ? "once per rank" : "per (token, expert)",
                         !replicated ? ""
                         : split     ? ", replicas split"
                                     : ", every replica dispatching");
  const auto full = static_cast<std::uint64_t>(static_cast<double>(request.tokens) * rowBytes);
  if (replicated) {
    const auto groups = allGroups(request.mesh, request.tokenAxes);
    if (request.placement == TokenPlacement::Partial) {
      out.program.push_back(split ? CommStep::collective(StepKind::ReduceScatter, groups, full)
                                  : CommStep::collective(StepKind::AllReduce, groups, full));
    }
    appendExchange(request, shape, out.program);
    if (split) {
      out.program.push_back(CommStep::collective(StepKind::AllGather, groups,
                                                 static_cast<std::uint64_t>(static_cast<double>(full) / tp)));
    }
  } else {
    appendExchange(request, shape, out.program);
  }
  return price(request, model, out);
}

std::string verdict(const char* rule, const RoutedCandidate& without, const RoutedCandidate& with, bool taken,
                    const CostModel* model) {
  const auto show = [&](const RoutedCandidate& c) {
    return model == nullptr ? fmt::format("{} B", c.bytesPerRank) : formatSeconds(c.seconds);
  };
  return fmt::format("{}: {} ({}) vs {} ({}): {}", rule, show(with), with.name, show(without), without.name,
                     taken ? "taken" : "not taken");
}

}  // namespace

double expectedDistinctRanks(std::int64_t experts, int ranks, int topK) {
  if (ranks <= 0 || experts <= 0 || topK <= 0) return 0;
  const double perRank = static_cast<double>(experts) / ranks;
  // C(E - E/R, K) / C(E, K) as a product, which stays in range for any E.
  double missRank = 1;
  for (int i = 0; i < topK; ++i) {
    missRank *= std::max(0.0, (static_cast<double>(experts) - perRank - i) / (static_cast<double>(experts) - i));
  }
  return ranks * (1 - missRank);
}

Status planRouted(const RoutedRequest& request, const CostModel* model, RoutedDecision& out) {
  const int ranks = request.mesh.groupSize(request.group);
  CHIMERA_CHECK_ARG(!request.group.empty(), "routed exchange: empty dispatch group");
  CHIMERA_CHECK_ARG(request.experts > 0 && request.experts % ranks == 0,
                    "routed exchange: {} experts do not split into blocks over the {} ranks of group {}",
                    request.experts, ranks, request.mesh.axesName(request.group));
  CHIMERA_CHECK_ARG(request.topK >= 1 && request.topK <= request.experts, "routed exchange: top-{} of {} experts",
                    request.topK, request.experts);
  CHIMERA_CHECK_ARG(request.tokens >= 0 && request.hidden >= 1, "routed exchange: {} tokens of hidden size {}",
                    request.tokens, request.hidden);
  CHIMERA_CHECK_ARG(
      (request.tokenAxes & request.group).empty() || (request.tokenAxes & request.group) == request.tokenAxes,
      "routed exchange: token axes {} lie partly inside dispatch group {}", request.mesh.axesName(request.tokenAxes),
      request.mesh.axesName(request.group));
  CHIMERA_CHECK_ARG(request.placement == TokenPlacement::Owned || !request.tokenAxes.empty(),
                    "routed exchange: replicated or partial tokens need token axes");
  const double distinct =
      request.distinctRanks > 0 ? request.distinctRanks : expectedDistinctRanks(request.experts, ranks, request.topK);
  out = {};
  CHIMERA_RETURN_IF_ERROR(build(request, distinct, false, false, model, out.baseline));
  // Rule 1: once per destination rank.
  RoutedCandidate perRank;
  CHIMERA_RETURN_IF_ERROR(build(request, distinct, true, false, model, perRank));
  out.oncePerRank = perRank.seconds < out.baseline.seconds;
  out.explanation.push_back(verdict("send once per destination rank", out.baseline, perRank, out.oncePerRank, model));
  RoutedCandidate best = out.oncePerRank ? perRank : out.baseline;
  // Rules 2 and 3: replicas dispatch disjoint parts (after a ReduceScatter for partial tokens).
  if (request.placement != TokenPlacement::Owned) {
    RoutedCandidate split;
    CHIMERA_RETURN_IF_ERROR(build(request, distinct, out.oncePerRank, true, model, split));
    out.splitReplicas = split.seconds < best.seconds;
    out.explanation.push_back(verdict(request.placement == TokenPlacement::Partial
                                          ? "ReduceScatter then dispatch the own shard"
                                          : "replicas dispatch disjoint parts",
                                      best, split, out.splitReplicas, model));
    if (out.splitReplicas) best = split;
  }
  out.fused = std::move(best);
  return Status::ok();
}

}  // namespace chimera
