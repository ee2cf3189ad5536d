// SPDX-License-Identifier: Apache-2.0
// Link sharing (private): which shared resources a transfer occupies on each fabric, and
// how long one round of concurrent transfers takes when they share them.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "chimera/planning/topology.hpp"

namespace chimera::detail {

/// One point-to-point flow of a round; bytes may be fractional (a ring chunk of L/n).
struct Flow {
  int src = 0;
  int dst = 0;
  double bytes = 0;
};

/// Time of one round of flows issued together.
struct RoundCost {
  double latencySeconds = 0;   ///< the largest alpha among the flows' paths
  double transferSeconds = 0;  ///< load / capacity of the busiest resource
  std::string bottleneck;      ///< that resource's name; empty when no bytes moved
  double crossBytes = 0;       ///< bytes of the flows between two domains (hosts, nodes, NUMA domains)
};

/// Prices one round on `topology`. Flows from a rank to itself, and empty flows, cost
/// nothing. Preconditions (checked by the caller): every rank in [0, topology.ranks),
/// topology valid.
RoundCost priceRound(const Topology& topology, std::span<const Flow> flows);

/// What priceRound returns for the round in which every member of every group sends
/// `bytes` to every other member of its group (an AllToAll), computed from each group's
/// count of members per domain instead of its n^2 flows: O(ranks log ranks).
RoundCost priceAllToAllRound(const Topology& topology, const std::vector<std::vector<int>>& groups, double bytes);

}  // namespace chimera::detail
