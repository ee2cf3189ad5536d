// SPDX-License-Identifier: Apache-2.0
// The fusion rules of the routed exchange, priced. Each rule is a choice between two
// programs of expected transfers (uniform routing, or the caller's expected distinct ranks);
// it is taken only when the program with it is predicted strictly cheaper.
#include "chimera/planning/routed_plan.hpp"
#include "chimera/planning/topology.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <span>

#include "core/check.hpp"

namespace chimera {
namespace {

// Bytes world rank `rank` sends in `step` (the formulas of docs/planner.md section 3).
double rankBytes(const CommStep& step, int rank) {
  if (step.kind == OpKind::ManyToMany) {
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
      case OpKind::AllReduce: return 2 * (n - 1) / n * l;
      case OpKind::ReduceScatter:
      case OpKind::AllToAll: return (n - 1) / n * l;
      case OpKind::AllGather: return (n - 1) * l;
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

struct Shape {
  double tokens = 0;           // tokens each rank dispatches
  double recordsPerToken = 0;  // records per token per destination (K/R per expert, D/R per rank)
  double headerBytes = 0;      // header bytes of one record
  double routingBytes = 0;     // routing a source sends its owner with the records (a stage's tokens)
};

// One source of an exchange: the rank that sends a token's records, and the owner, the rank
// whose group holds the experts and to which the combined rows return (the same rank, except
// for a stage's tokens sent straight from stage k).
struct Flow {
  int src = 0;
  int owner = 0;
};

double rowBytesOf(const RoutedRequest& request) {
  return static_cast<double>(request.hidden) * static_cast<double>(dataTypeSize(request.dtype));
}

// The routing of one token: K ids (int64) and K weights.
double routingBytesOf(const RoutedRequest& request) {
  return request.topK * (8.0 + static_cast<double>(dataTypeSize(request.weightDtype)));
}

// Every group along `axes` that holds one of `ranks`, each ordered by group index.
std::vector<std::vector<int>> groupsOf(const Mesh& mesh, AxisSet axes, std::span<const int> ranks) {
  std::map<int, std::vector<int>> byColor;
  for (int r : ranks) {
    const int color = mesh.groupColor(r, axes);
    if (!byColor.contains(color)) byColor[color] = mesh.groupRanks(r, axes);
  }
  std::vector<std::vector<int>> groups;
  for (auto& [color, members] : byColor) groups.push_back(std::move(members));
  return groups;
}

// The dispatch and combine of `shape` for `flows`: a count exchange, each source's records out
// to its owner's group, the rows back to the owner.
void appendExchange(const RoutedRequest& request, const Shape& shape, std::span<const Flow> flows,
                    CommProgram& program) {
  const double rowBytes = rowBytesOf(request);
  const int ranks = request.mesh.groupSize(request.group);
  const double records = shape.tokens * shape.recordsPerToken;
  std::vector<int> owners;
  bool straight = false;
  for (const Flow& f : flows) {
    owners.push_back(f.owner);
    straight = straight || f.src != f.owner;
  }
  if (!straight) {
    program.push_back(CommStep::collective(OpKind::AllToAll, groupsOf(request.mesh, request.group, owners),
                                           static_cast<std::uint64_t>(4 * ranks)));
  } else {
    // One round of 4-byte words: each source tells every destination its record count (the
    // owner also its token count) and hears its verdict, and tells the other sources of its
    // group whether it failed.
    std::vector<Transfer> words;
    for (const Flow& f : flows) {
      for (int dst : request.mesh.groupRanks(f.owner, request.group)) {
        words.push_back({f.src, dst, dst == f.owner ? 8u : 4u});
        words.push_back({dst, f.src, 4});
      }
      for (int other : request.mesh.groupRanks(f.src, request.group)) {
        if (other != f.src) words.push_back({f.src, other, 4});
      }
    }
    program.push_back(CommStep::manyToMany(std::move(words)));
  }
  std::vector<Transfer> out, back;
  for (const Flow& f : flows) {
    for (int dst : request.mesh.groupRanks(f.owner, request.group)) {
      const double routing = dst == f.owner && f.src != f.owner ? shape.tokens * shape.routingBytes : 0.0;
      out.push_back(
          {f.src, dst, static_cast<std::uint64_t>(std::llround(records * (rowBytes + shape.headerBytes) + routing))});
      back.push_back({dst, f.owner, static_cast<std::uint64_t>(std::llround(records * rowBytes))});
    }
  }
  // Both sides pass every record once more (pack at the source, expansion at the receiver).
  const auto local = static_cast<std::uint64_t>(records * ranks * rowBytes);
  CommStep dispatch = CommStep::manyToMany(std::move(out));
  dispatch.localBytes = 2 * local;
  dispatch.localLaunches = 2;
  CommStep combine = CommStep::manyToMany(std::move(back));
  combine.localBytes = 2 * local;
  combine.localLaunches = 2;
  program.push_back(std::move(dispatch));
  program.push_back(std::move(combine));
}

// The hosts of `request`'s dispatch group that holds world rank `rank`: its members (world
// ranks) per host, hosts in the order of their lowest group index.
std::vector<std::vector<int>> hostsOfGroup(const RoutedRequest& request, int rank) {
  const std::vector<int> group = request.mesh.groupRanks(rank, request.group);
  std::vector<std::vector<int>> members = membersByHost(group, request.hosts);
  for (std::vector<int>& host : members) {
    for (int& member : host) member = group[static_cast<std::size_t>(member)];
  }
  return members;
}

// Whether the dispatch group of a source of `flows` spans hosts (any spanning group counts).
bool spansHosts(const RoutedRequest& request, std::span<const Flow> flows) {
  return std::any_of(flows.begin(), flows.end(),
                     [&](const Flow& f) { return hostsOfGroup(request, f.src).size() > 1; });
}

// The dispatch and combine once per destination host (rule 6) of `flows`, each source its own
// owner (owned or split tokens, or a stage's after the hand-off): the count exchange of two
// words per peer; the records to the ranks of the source's host and one host record per token
// and other host to the forwarder there (the member with the source's place on its own host);
// the forwarders' records to their host's ranks; combine the reverse, a forwarder's sums of a
// host record's rows crossing back once.
void appendHostExchange(const RoutedRequest& request, const Shape& shape, double hostHeaderBytes,
                        std::span<const Flow> flows, CommProgram& program) {
  const double rowBytes = rowBytesOf(request);
  const int ranks = request.mesh.groupSize(request.group);
  const double perRank = static_cast<double>(request.experts) / ranks;
  const double records = shape.tokens * shape.recordsPerToken;
  // The probability that a token picks a host of n ranks.
  const auto hit = [&](std::size_t n) {
    if (request.distinctRanks > 0)
      return 1 - std::pow(std::max(0.0, 1 - request.distinctRanks / ranks), static_cast<double>(n));
    return expectedHit(request.experts, std::llround(perRank * static_cast<double>(n)), request.topK);
  };
  std::vector<int> sources;
  for (const Flow& f : flows) sources.push_back(f.src);
  program.push_back(CommStep::collective(OpKind::AllToAll, groupsOf(request.mesh, request.group, sources),
                                         static_cast<std::uint64_t>(8 * ranks)));
  const auto bytes = [](double b) { return static_cast<std::uint64_t>(std::llround(b)); };
  std::vector<Transfer> out, fan, in, back;
  for (const int r : sources) {
    const std::vector<std::vector<int>> hosts = hostsOfGroup(request, r);
    std::size_t own = 0, place = 0;
    for (std::size_t h = 0; h < hosts.size(); ++h) {
      const auto at = std::find(hosts[h].begin(), hosts[h].end(), r);
      if (at != hosts[h].end()) {
        own = h;
        place = static_cast<std::size_t>(at - hosts[h].begin());
      }
    }
    for (std::size_t h = 0; h < hosts.size(); ++h) {
      if (h == own) {
        for (int dst : hosts[h]) {
          out.push_back({r, dst, bytes(records * (rowBytes + shape.headerBytes))});
          back.push_back({dst, r, bytes(records * rowBytes)});
        }
        continue;
      }
      const int forwarder = hosts[h][place % hosts[h].size()];
      const double hostRecords = shape.tokens * hit(hosts[h].size());
      out.push_back({r, forwarder, bytes(hostRecords * (rowBytes + hostHeaderBytes))});
      back.push_back({forwarder, r, bytes(hostRecords * rowBytes)});
      for (int dst : hosts[h]) {
        fan.push_back({forwarder, dst, bytes(records * (rowBytes + shape.headerBytes))});
        in.push_back({dst, forwarder, bytes(records * rowBytes)});
      }
    }
  }
  // Both sides pass every record once more (pack, expansion), the forwarders the fanned ones.
  const auto local = static_cast<std::uint64_t>(records * ranks * rowBytes);
  for (auto* step : {&out, &fan, &in, &back}) {
    CommStep s = CommStep::manyToMany(std::move(*step));
    s.localBytes = 2 * local;
    s.localLaunches = 2;
    program.push_back(std::move(s));
  }
}

// The flows of `request`: every rank its own source and owner; for a stage's tokens, the ranks
// of stage k and their peers on stage k+1, sending straight (`straight`) or after the hand-off
// (the owners are then their own sources).
std::vector<Flow> flowsOf(const RoutedRequest& request, bool straight) {
  std::vector<Flow> flows;
  for (int r = 0; r < request.mesh.size(); ++r) {
    if (request.placement != TokenPlacement::Stage) {
      flows.push_back({r, r});
    } else if (request.mesh.groupIndex(r, request.tokenAxes) == request.stage) {
      const int owner = request.mesh.groupPeer(r, request.tokenAxes, request.stage + 1);
      flows.push_back({straight ? r : owner, owner});
    }
  }
  return flows;
}

// The pipeline hand-off of a stage's tokens: each rank of stage k sends its rows and routing to
// its peer on stage k+1.
CommStep handOff(const RoutedRequest& request) {
  const double perToken = rowBytesOf(request) + routingBytesOf(request);
  std::vector<Transfer> transfers;
  for (const Flow& f : flowsOf(request, true)) {
    transfers.push_back(
        {f.src, f.owner, static_cast<std::uint64_t>(std::llround(static_cast<double>(request.tokens) * perToken))});
  }
  return CommStep::manyToMany(std::move(transfers));
}

Status price(const RoutedRequest& request, const CostModel* model, RoutedCandidate& candidate) {
  candidate.bytesPerRank = static_cast<std::uint64_t>(busiestBytes(candidate.program, request.mesh.size()));
  if (model == nullptr) {
    candidate.seconds = static_cast<double>(candidate.bytesPerRank);
    return Status::ok();
  }
  return model->predict(candidate.program, candidate.seconds);
}

// The program with (`oncePerRank`, `fuseTokens`): replicas split (tp=R, tp=P), or a stage's
// tokens sent straight to the next stage's experts (pp=@k).
Status build(const RoutedRequest& request, double distinct, bool oncePerRank, bool fuseTokens, const CostModel* model,
             RoutedCandidate& out, bool perHost = false) {
  const int ranks = request.mesh.groupSize(request.group);
  const double rowBytes = rowBytesOf(request);
  const double slots =
      oncePerRank ? static_cast<double>(std::min<std::int64_t>(request.topK, request.experts / ranks)) : 1.0;
  const double tp = static_cast<double>(request.mesh.groupSize(request.tokenAxes));
  const bool replicated =
      request.placement == TokenPlacement::Replicated || request.placement == TokenPlacement::Partial;
  const bool stage = request.placement == TokenPlacement::Stage;
  const bool split = replicated && fuseTokens;
  Shape shape;
  shape.tokens = static_cast<double>(request.tokens) / (split ? tp : 1.0);
  shape.recordsPerToken = (oncePerRank ? distinct : static_cast<double>(request.topK)) / ranks;
  // A slot's local expert id, implied with one expert per rank, and by the records' order where a
  // record has one slot (dropless, not straight from a stage).
  const bool implied = request.experts == ranks || (slots == 1.0 && !(stage && fuseTokens) && !perHost);
  const double idBytes = implied ? 0.0 : 4.0;
  shape.headerBytes = slots * (idBytes + static_cast<double>(dataTypeSize(request.weightDtype)));
  shape.routingBytes = routingBytesOf(request);
  out = {};
  out.name = fmt::format("{}{}",
                         perHost       ? "once per host"
                         : oncePerRank ? "once per rank"
                                       : "per (token, expert)",
                         stage         ? (fuseTokens ? ", straight from the stage" : ", after the stage hand-off")
                         : !replicated ? ""
                         : split       ? ", replicas split"
                                       : ", every replica dispatching");
  const auto full = static_cast<std::uint64_t>(static_cast<double>(request.tokens) * rowBytes);
  const std::vector<Flow> flows = flowsOf(request, fuseTokens);
  std::size_t most = 1;  // the most ranks of one host in a source's group (once per host)
  if (perHost) {
    for (const Flow& f : flows) {
      for (const std::vector<int>& members : hostsOfGroup(request, f.src)) most = std::max(most, members.size());
    }
  }
  const double hostHeaderBytes = static_cast<double>(std::min<std::int64_t>(
                                     request.topK, request.experts / ranks * static_cast<std::int64_t>(most))) *
                                 (4.0 + static_cast<double>(dataTypeSize(request.weightDtype)));
  const auto exchange = [&](CommProgram& program) {
    if (perHost) {
      appendHostExchange(request, shape, hostHeaderBytes, flows, program);
    } else {
      appendExchange(request, shape, flows, program);
    }
  };
  if (replicated) {
    std::vector<int> all(static_cast<std::size_t>(request.mesh.size()));
    for (int r = 0; r < request.mesh.size(); ++r) all[static_cast<std::size_t>(r)] = r;
    const auto groups = groupsOf(request.mesh, request.tokenAxes, all);
    if (request.placement == TokenPlacement::Partial) {
      out.program.push_back(split ? CommStep::collective(OpKind::ReduceScatter, groups, full)
                                  : CommStep::collective(OpKind::AllReduce, groups, full));
    }
    exchange(out.program);
    if (split) {
      out.program.push_back(
          CommStep::collective(OpKind::AllGather, groups, static_cast<std::uint64_t>(static_cast<double>(full) / tp)));
    }
  } else {
    if (stage && !fuseTokens) out.program.push_back(handOff(request));
    exchange(out.program);
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

double expectedHit(std::int64_t experts, std::int64_t held, int topK) {
  if (experts <= 0 || topK <= 0) return 0;
  double miss = 1;
  for (int i = 0; i < topK; ++i) {
    miss *= std::max(
        0.0, (static_cast<double>(experts) - static_cast<double>(held) - i) / (static_cast<double>(experts) - i));
  }
  return 1 - miss;
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
                    "routed exchange: replicated, partial or stage tokens need token axes");
  if (request.placement == TokenPlacement::Stage) {
    const int stages = request.mesh.groupSize(request.tokenAxes);
    CHIMERA_CHECK_ARG((request.tokenAxes & request.group).empty(),
                      "routed exchange: the pipeline axis {} lies inside dispatch group {}",
                      request.mesh.axesName(request.tokenAxes), request.mesh.axesName(request.group));
    CHIMERA_CHECK_ARG(request.stage >= 0 && request.stage + 1 < stages,
                      "routed exchange: tokens on stage {} of {} have no next stage {} for the experts", request.stage,
                      stages, request.stage + 1);
  }
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
  // Rule 5: a stage's tokens straight to the next stage's experts, instead of the hand-off then
  // the dispatch there (the stage link carries D rows per token instead of one).
  if (request.placement == TokenPlacement::Stage) {
    RoutedCandidate straight;
    CHIMERA_RETURN_IF_ERROR(build(request, distinct, out.oncePerRank, true, model, straight));
    out.straightFromStage = straight.seconds < best.seconds;
    out.explanation.push_back(
        verdict("dispatch straight from the stage", best, straight, out.straightFromStage, model));
    if (out.straightFromStage) best = straight;
  }
  // Rules 2 and 3: replicas dispatch disjoint parts (after a ReduceScatter for partial tokens).
  if (request.placement == TokenPlacement::Replicated || request.placement == TokenPlacement::Partial) {
    RoutedCandidate split;
    CHIMERA_RETURN_IF_ERROR(build(request, distinct, out.oncePerRank, true, model, split));
    out.splitReplicas = split.seconds < best.seconds;
    out.explanation.push_back(verdict(request.placement == TokenPlacement::Partial
                                          ? "ReduceScatter then dispatch the own shard"
                                          : "replicas dispatch disjoint parts",
                                      best, split, out.splitReplicas, model));
    if (out.splitReplicas) best = split;
  }
  // Rule 6: once per destination host, where the dispatch group spans hosts: a token's records
  // for another host cross once, to a forwarder there, which fans them out (rule 1 taken). A
  // stage's tokens take it after the hand-off, in stage k+1's dispatch (sent straight, a source
  // would need a forwarder on every host of the next stage's group), against whichever of the
  // two rule 5 chose: taken, it replaces a straight dispatch. Priced on the forward: the
  // backwards take the same decision and run its two exchanges in reverse (the combine backward
  // as the dispatch, without headers; the dispatch backward as the combine, with the weight
  // gradients), so the verdict holds for a training step.
  if (out.oncePerRank && spansHosts(request, flowsOf(request, false))) {
    const bool stage = request.placement == TokenPlacement::Stage;
    RoutedCandidate perHost;
    CHIMERA_RETURN_IF_ERROR(build(request, distinct, true, out.splitReplicas, model, perHost, true));
    out.oncePerHost = perHost.seconds < best.seconds;
    out.explanation.push_back(
        verdict(stage ? "send once per destination host after the stage hand-off" : "send once per destination host",
                best, perHost, out.oncePerHost, model));
    if (out.oncePerHost) {
      best = perHost;
      out.straightFromStage = false;
    }
  }
  out.fused = std::move(best);
  return Status::ok();
}

}  // namespace chimera
