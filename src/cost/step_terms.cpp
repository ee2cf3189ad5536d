// SPDX-License-Identifier: Apache-2.0
// Implements the alpha-beta terms of one step, shared by the cost model and calibration.
#include "cost/step_terms.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "chimera/planning/cost_model.hpp"
#include "core/check.hpp"
#include "cost/fabric.hpp"

namespace chimera::detail {

namespace {

using Groups = std::vector<std::vector<int>>;

// One ring round: every member sends `bytes` to its successor in the group's order.
std::vector<Flow> ringRound(const Groups& groups, double bytes) {
  std::vector<Flow> flows;
  for (const auto& group : groups) {
    for (std::size_t i = 0; i < group.size(); ++i) {
      flows.push_back({group[i], group[(i + 1) % group.size()], bytes});
    }
  }
  return flows;
}

// The root (first member) feeds a pipelined chain: every chain link carries the buffer.
std::vector<Flow> chainRound(const Groups& groups, double bytes) {
  std::vector<Flow> flows;
  for (const auto& group : groups) {
    for (std::size_t i = 0; i + 1 < group.size(); ++i) flows.push_back({group[i], group[i + 1], bytes});
  }
  return flows;
}

void addRounds(StepTerms& terms, const RoundCost& round, double count, double latencyCount) {
  terms.latencySeconds += latencyCount * round.latencySeconds;
  terms.transferSeconds += count * round.transferSeconds;
  terms.crossBytes += count * round.crossBytes;
  if (!round.bottleneck.empty()) terms.bottleneck = round.bottleneck;
}

// Reductions of all participating ranks run at once; on a host they share computeSlots cores
// (on a host network, each host its own).
double reduceSharing(const Topology& topology, const Groups& groups) {
  if (topology.computeSlots <= 0) return 1.0;
  std::vector<std::size_t> reducers(
      static_cast<std::size_t>(topology.fabric == Fabric::HostNetwork ? domainCount(topology) : 1), 0);
  for (const auto& group : groups) {
    for (const int rank : group) {
      ++reducers[topology.fabric == Fabric::HostNetwork ? static_cast<std::size_t>(domainOf(topology, rank)) : 0];
    }
  }
  const std::size_t most = *std::max_element(reducers.begin(), reducers.end());
  return std::max(1.0, static_cast<double>(most) / topology.computeSlots);
}

// A collective over groups that span hosts, as run hierarchically: each group's members on
// one host (`inside`, in group order) and, across hosts, the i-th member on every host (`lanes`).
struct Hierarchy {
  Groups inside;
  Groups lanes;
  int mostInside = 0;  // members of the largest host part
  int mostHosts = 0;   // hosts of the widest lane
};

bool spansHosts(const Topology& topology, const Groups& groups) {
  if (topology.fabric != Fabric::HostNetwork) return false;
  for (const auto& group : groups) {
    for (const int rank : group) {
      if (domainOf(topology, rank) != domainOf(topology, group.front())) return true;
    }
  }
  return false;
}

Hierarchy hierarchyOf(const Topology& topology, const Groups& groups) {
  Hierarchy h;
  for (const auto& group : groups) {
    std::vector<int> hosts;  // in order of first member
    Groups parts;
    for (const int rank : group) {
      const int host = domainOf(topology, rank);
      const auto at = std::find(hosts.begin(), hosts.end(), host);
      if (at == hosts.end()) {
        hosts.push_back(host);
        parts.push_back({rank});
      } else {
        parts[static_cast<std::size_t>(at - hosts.begin())].push_back(rank);
      }
    }
    std::size_t widest = 0;
    for (const auto& part : parts) widest = std::max(widest, part.size());
    for (std::size_t i = 0; i < widest; ++i) {
      std::vector<int> lane;
      for (const auto& part : parts) {
        if (i < part.size()) lane.push_back(part[i]);
      }
      h.mostHosts = std::max(h.mostHosts, static_cast<int>(lane.size()));
      h.lanes.push_back(std::move(lane));
    }
    h.mostInside = std::max(h.mostInside, static_cast<int>(widest));
    for (auto& part : parts) h.inside.push_back(std::move(part));
  }
  return h;
}

// One ring round of `groups` in which each member sends `bytesOf(member)`.
template <typename BytesOf>
std::vector<Flow> ringRoundOf(const Groups& groups, BytesOf bytesOf) {
  std::vector<Flow> flows;
  for (const auto& group : groups) {
    for (std::size_t i = 0; i < group.size(); ++i) {
      flows.push_back({group[i], group[(i + 1) % group.size()], bytesOf(group[i])});
    }
  }
  return flows;
}

// The pieces the MPI backend pipelines a hierarchical collective over `bytes` (an AllReduce's or
// ReduceScatter's input, an AllGather's output) at its default segment (src/mpi/hierarchical.hpp):
// pieces of at least two 1 MiB segments, at most eight.
double hierarchicalPieces(double bytes) {
  constexpr double kLeastPieceBytes = 2 << 20;
  return std::clamp(std::floor(bytes / kLeastPieceBytes), 1.0, 8.0);
}

// Rounds of one phase of a hierarchical collective.
struct Phase {
  RoundCost round;
  double rounds = 0;
};

// Two phases of a hierarchical collective pipelined over `pieces`: while one piece is in the
// second, the next is in the first, so the slower phase bounds the step and the faster adds its
// share of one piece (the fill and the drain).
void addPipelined(StepTerms& terms, const Phase& first, const Phase& second, double pieces) {
  StepTerms phases;
  addRounds(phases, first.round, first.rounds, first.rounds);
  const double firstSeconds = phases.transferSeconds;
  addRounds(phases, second.round, second.rounds, second.rounds);
  const double secondSeconds = phases.transferSeconds - firstSeconds;
  terms.latencySeconds += phases.latencySeconds;
  terms.transferSeconds += std::max(firstSeconds, secondSeconds) + std::min(firstSeconds, secondSeconds) / pieces;
  terms.crossBytes += phases.crossBytes;
  if (!phases.bottleneck.empty()) terms.bottleneck = phases.bottleneck;
}

// The rounds of the hierarchical AllReduce, ReduceScatter and AllGather of the host-network
// fabric: AllReduce = ReduceScatter inside each host, AllReduce across hosts on the 1/c shard,
// AllGather inside; ReduceScatter = inside, then across on the shard; AllGather = across, then
// inside on the gathered H shards; each pipelined over pieces (addPipelined). Each byte of a
// host's shard crosses its NIC once per ring step, every lane of the host at once.
void addHierarchicalRounds(const Topology& topology, const CommStep& step, StepTerms& terms) {
  const Hierarchy h = hierarchyOf(topology, step.groups);
  const auto bytes = static_cast<double>(step.bytesPerRank);
  std::vector<double> inHost(static_cast<std::size_t>(topology.ranks), 1);  // members on the rank's host, its group
  for (const auto& part : h.inside) {
    for (const int rank : part) inHost[static_cast<std::size_t>(rank)] = static_cast<double>(part.size());
  }
  const double c = h.mostInside;
  const double hosts = h.mostHosts;
  const auto shard = [&](int rank) { return bytes / inHost[static_cast<std::size_t>(rank)]; };
  const RoundCost inside = priceRound(topology, ringRoundOf(h.inside, shard));
  switch (step.kind) {
    case OpKind::AllReduce: {
      const RoundCost across = priceRound(topology, ringRoundOf(h.lanes, [&](int r) { return shard(r) / hosts; }));
      addPipelined(terms, {inside, 2 * (c - 1)}, {across, 2 * (hosts - 1)}, hierarchicalPieces(bytes));
      break;
    }
    case OpKind::ReduceScatter: {
      const RoundCost across = priceRound(topology, ringRoundOf(h.lanes, [&](int r) { return shard(r) / hosts; }));
      addPipelined(terms, {inside, c - 1}, {across, hosts - 1}, hierarchicalPieces(bytes));
      break;
    }
    case OpKind::AllGather: {
      const RoundCost across = priceRound(topology, ringRoundOf(h.lanes, [&](int) { return bytes; }));
      const RoundCost gathered = priceRound(topology, ringRoundOf(h.inside, [&](int) { return hosts * bytes; }));
      const double n = static_cast<double>(step.groups.front().size());
      addPipelined(terms, {across, hosts - 1}, {gathered, c - 1}, hierarchicalPieces(n * bytes));
      break;
    }
    default: CHIMERA_ASSERT(false);
  }
}

StepTerms collectiveTerms(const Topology& topology, const CommStep& step) {
  StepTerms terms;
  const auto n = static_cast<double>(step.groups.front().size());
  if (n < 2) return terms;  // a group of one moves nothing
  const auto bytes = static_cast<double>(step.bytesPerRank);
  const double chunk = bytes / n;
  const bool hierarchical =
      step.kind == OpKind::AllReduce || step.kind == OpKind::ReduceScatter || step.kind == OpKind::AllGather;
  if (hierarchical && spansHosts(topology, step.groups)) {
    addHierarchicalRounds(topology, step, terms);
    if (step.kind != OpKind::AllGather) terms.reducedBytes = (n - 1) * chunk * reduceSharing(topology, step.groups);
    terms.transferSeconds *= topology.transferFactors.of(step.kind);
    return terms;
  }
  switch (step.kind) {
    case OpKind::AllReduce:
      addRounds(terms, priceRound(topology, ringRound(step.groups, chunk)), 2 * (n - 1), 2 * (n - 1));
      terms.reducedBytes = (n - 1) * chunk * reduceSharing(topology, step.groups);
      break;
    case OpKind::ReduceScatter:
      addRounds(terms, priceRound(topology, ringRound(step.groups, chunk)), n - 1, n - 1);
      terms.reducedBytes = (n - 1) * chunk * reduceSharing(topology, step.groups);
      break;
    case OpKind::AllGather: addRounds(terms, priceRound(topology, ringRound(step.groups, bytes)), n - 1, n - 1); break;
    case OpKind::AllToAll: addRounds(terms, priceAllToAllRound(topology, step.groups, chunk), 1, 1); break;
    case OpKind::Broadcast: addRounds(terms, priceRound(topology, chainRound(step.groups, bytes)), 1, n - 1); break;
    default: CHIMERA_ASSERT(false);  // ManyToMany is priced apart; validateStep refuses the rest
  }
  terms.transferSeconds *= topology.transferFactors.of(step.kind);
  return terms;
}

// Distinct peers the busiest rank sends to or receives from in a many-to-many.
int manyToManyPeers(const Topology& topology, const std::vector<Transfer>& transfers) {
  std::vector<std::vector<int>> sendsTo(static_cast<std::size_t>(topology.ranks));
  std::vector<std::vector<int>> receivesFrom(static_cast<std::size_t>(topology.ranks));
  const auto add = [](std::vector<int>& list, int peer) {
    if (std::find(list.begin(), list.end(), peer) == list.end()) list.push_back(peer);
  };
  std::size_t most = 0;
  for (const Transfer& t : transfers) {
    if (t.src == t.dst || t.bytes == 0) continue;
    auto& out = sendsTo[static_cast<std::size_t>(t.src)];
    auto& in = receivesFrom[static_cast<std::size_t>(t.dst)];
    add(out, t.dst);
    add(in, t.src);
    most = std::max({most, out.size(), in.size()});
  }
  return static_cast<int>(most);
}

// Peers of the busiest rank: one for the ring and chain algorithms, n-1 for an AllToAll.
int collectivePeers(const CommStep& step) {
  const auto n = static_cast<int>(step.groups.front().size());
  if (n < 2 || step.bytesPerRank == 0) return 0;
  return step.kind == OpKind::AllToAll ? n - 1 : 1;
}

// The fixed and local terms of `step` (see StepTerms).
void addOverheads(const Topology& topology, const CommStep& step, int peers, StepTerms& terms) {
  if (peers > 0) {
    terms.steps = 1;
    terms.overheadSeconds += topology.stepSeconds + topology.peerSeconds * (peers - 1);
  }
  terms.overheadSeconds += topology.device.launchSeconds * step.localLaunches;
  terms.localSeconds = localPassSeconds(topology, static_cast<double>(step.localBytes), step.localRanks);
}

}  // namespace

Status stepTerms(const Topology& topology, const CommStep& step, StepTerms& out) {
  CHIMERA_RETURN_IF_ERROR(validateTopology(topology));  // a few comparisons; keeps priceRound safe
  CHIMERA_RETURN_IF_ERROR(validateStep(step, topology.ranks));
  CHIMERA_CHECK_ARG(step.localLaunches >= 0, "step {}: local launches must be >= 0, got {}", step.toString(),
                    step.localLaunches);
  CHIMERA_CHECK_ARG(step.localRanks >= 0 && step.localRanks <= topology.ranks,
                    "step {}: local ranks must be in 0..{}, got {}", step.toString(), topology.ranks, step.localRanks);
  if (step.kind != OpKind::ManyToMany) {
    out = collectiveTerms(topology, step);
    addOverheads(topology, step, collectivePeers(step), out);
    return Status::ok();
  }
  std::vector<Flow> flows;
  flows.reserve(step.transfers.size());
  for (const Transfer& t : step.transfers) flows.push_back({t.src, t.dst, static_cast<double>(t.bytes)});
  StepTerms terms;
  addRounds(terms, priceRound(topology, flows), 1, 1);
  terms.transferSeconds *= topology.transferFactors.of(OpKind::ManyToMany);
  addOverheads(topology, step, manyToManyPeers(topology, step.transfers), terms);
  out = terms;
  return Status::ok();
}

}  // namespace chimera::detail
