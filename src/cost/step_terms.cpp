// SPDX-License-Identifier: Apache-2.0
#include "cost/step_terms.hpp"

#include <algorithm>
#include <vector>

#include "common/check.hpp"
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

// Every member sends `bytes` to every other member at once (NCCL-style all-to-all).
std::vector<Flow> allToAllRound(const Groups& groups, double bytes) {
  std::vector<Flow> flows;
  for (const auto& group : groups) {
    for (const int src : group) {
      for (const int dst : group) {
        if (src != dst) flows.push_back({src, dst, bytes});
      }
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
    case StepKind::AllToAll:
      addRounds(terms, priceRound(topology, allToAllRound(step.groups, chunk)), 1, 1);
      break;
    case StepKind::Broadcast:
      addRounds(terms, priceRound(topology, chainRound(step.groups, bytes)), 1, n - 1);
      break;
    case StepKind::ManyToMany: CHIMERA_ASSERT(false);
  }
  return terms;
}

}  // namespace

Status stepTerms(const Topology& topology, const CommStep& step, StepTerms& out) {
  CHIMERA_RETURN_IF_ERROR(validateTopology(topology));  // a few comparisons; keeps priceRound safe
  CHIMERA_RETURN_IF_ERROR(validateStep(step, topology.ranks));
  if (step.kind != StepKind::ManyToMany) {
    out = collectiveTerms(topology, step);
    return Status::ok();
  }
  std::vector<Flow> flows;
  flows.reserve(step.transfers.size());
  for (const Transfer& t : step.transfers) flows.push_back({t.src, t.dst, static_cast<double>(t.bytes)});
  StepTerms terms;
  addRounds(terms, priceRound(topology, flows), 1, 1);
  out = terms;
  return Status::ok();
}

}  // namespace chimera::detail
