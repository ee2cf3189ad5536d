// SPDX-License-Identifier: Apache-2.0
// Implements the alpha-beta terms of one step, shared by the cost model and calibration.
#include "cost/step_terms.hpp"

#include <algorithm>
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

// Reductions of all participating ranks run at once; on a host they share computeSlots cores.
double reduceSharing(const Topology& topology, const Groups& groups) {
  if (topology.computeSlots <= 0) return 1.0;
  std::size_t reducers = 0;
  for (const auto& group : groups) reducers += group.size();
  return std::max(1.0, static_cast<double>(reducers) / topology.computeSlots);
}

void addRounds(StepTerms& terms, const RoundCost& round, double count, double latencyCount) {
  terms.latencySeconds += latencyCount * round.latencySeconds;
  terms.transferSeconds += count * round.transferSeconds;
  if (!round.bottleneck.empty()) terms.bottleneck = round.bottleneck;
}

StepTerms collectiveTerms(const Topology& topology, const CommStep& step) {
  StepTerms terms;
  const auto n = static_cast<double>(step.groups.front().size());
  if (n < 2) return terms;  // a group of one moves nothing
  const auto bytes = static_cast<double>(step.bytesPerRank);
  const double chunk = bytes / n;
  switch (step.kind) {
    case StepKind::AllReduce:
      addRounds(terms, priceRound(topology, ringRound(step.groups, chunk)), 2 * (n - 1), 2 * (n - 1));
      terms.reducedBytes = (n - 1) * chunk * reduceSharing(topology, step.groups);
      break;
    case StepKind::ReduceScatter:
      addRounds(terms, priceRound(topology, ringRound(step.groups, chunk)), n - 1, n - 1);
      terms.reducedBytes = (n - 1) * chunk * reduceSharing(topology, step.groups);
      break;
    case StepKind::AllGather:
      addRounds(terms, priceRound(topology, ringRound(step.groups, bytes)), n - 1, n - 1);
      break;
    case StepKind::AllToAll: addRounds(terms, priceAllToAllRound(topology, step.groups, chunk), 1, 1); break;
    case StepKind::Broadcast: addRounds(terms, priceRound(topology, chainRound(step.groups, bytes)), 1, n - 1); break;
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
  return step.kind == StepKind::AllToAll ? n - 1 : 1;
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
  if (step.kind != StepKind::ManyToMany) {
    out = collectiveTerms(topology, step);
    addOverheads(topology, step, collectivePeers(step), out);
    return Status::ok();
  }
  std::vector<Flow> flows;
  flows.reserve(step.transfers.size());
  for (const Transfer& t : step.transfers) flows.push_back({t.src, t.dst, static_cast<double>(t.bytes)});
  StepTerms terms;
  addRounds(terms, priceRound(topology, flows), 1, 1);
  terms.transferSeconds *= topology.transferFactors.of(StepKind::ManyToMany);
  addOverheads(topology, step, manyToManyPeers(topology, step.transfers), terms);
  out = terms;
  return Status::ok();
}

}  // namespace chimera::detail
