// SPDX-License-Identifier: Apache-2.0
// Where the members of one group run (private): which members share a host, and the lanes the
// hierarchical collectives cross the hosts on. Pure arithmetic on the host of each member, the
// same on every member; docs/performance.md ("Across hosts") describes the programs built on it.
#pragma once

#include <span>
#include <vector>

namespace chimera::detail {

/// The members of a group (by group index) placed on hosts. Hosts are numbered 0, 1, ... in
/// the order of their lowest member; the members of one host are in ascending group index, and
/// a member's place among them is its local index. There are as many lanes as the fewest
/// members any host holds: lane j is the member of local index j on every host (j < lanes),
/// and a member of local index j >= lanes is served by lane j mod lanes of its host.
struct HostLayout {
  /// Host of each member.
  std::vector<int> hostOf;
  /// Local index of each member on its host.
  std::vector<int> localIndex;
  /// Members of each host, ascending.
  std::vector<std::vector<int>> members;
  /// Fewest members on any host (>= 1 for a group of at least one member).
  int lanes = 1;

  /// Number of hosts.
  int hosts() const { return static_cast<int>(members.size()); }
  /// The lane that carries `member`'s data across the hosts (its local index mod lanes).
  int laneOf(int member) const { return localIndex[static_cast<std::size_t>(member)] % lanes; }
  /// Whether `member` is a lane member (local index < lanes).
  bool inLane(int member) const { return localIndex[static_cast<std::size_t>(member)] < lanes; }
  /// The member that serves lane `lane` on host `host`.
  int laneMember(int host, int lane) const {
    return members[static_cast<std::size_t>(host)][static_cast<std::size_t>(lane)];
  }
  /// Whether the hierarchical programs differ from the flat ones: the group spans at least two
  /// hosts and some host holds two or more of its members.
  bool hierarchical() const;
};

/// The layout of a group whose member i runs on host `hostOfMember[i]` (any host numbers, e.g.
/// world host ids; only equality matters).
HostLayout makeHostLayout(std::span<const int> hostOfMember);

}  // namespace chimera::detail
