// SPDX-License-Identifier: Apache-2.0
// The communicators of the hierarchical collectives (private): for a group whose members span
// hosts, one communicator over the group's members on this rank's host and one over this rank's
// lane across the hosts (host_layout.hpp), created once per group and cached.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/status.hpp"
#include "mpi/host_layout.hpp"
#include "mpi/mpi_group.hpp"

namespace chimera::detail {

/// A group seen through its hosts: the layout of its members, and this member's two subgroups.
struct HostHierarchy {
  HostLayout layout;
  /// The group's members on this member's host, by local index (index = local index).
  MpiGroup host;
  /// This member's lane: the lane members of every host, by host (index = host). Its comm is
  /// MPI_COMM_NULL on a member that is not a lane member.
  MpiGroup lane;
  /// Whether the communicators exist (the layout is known before they are made).
  bool made = false;
};

/// The hierarchies of a backend's groups, keyed by AxisSet, made from the host of every world rank.
class HostHierarchyCache {
 public:
  explicit HostHierarchyCache(std::vector<int> hostOfRank) : hostOfRank_(std::move(hostOfRank)) {}
  HostHierarchyCache(const HostHierarchyCache&) = delete;
  HostHierarchyCache& operator=(const HostHierarchyCache&) = delete;
  /// Frees the communicators (unless MPI is finalised or the cache was abandoned).
  ~HostHierarchyCache();

  /// The layout of `group` (the group along `axes`), computed on first use; communicates nothing.
  const HostLayout& layout(AxisSet axes, const MpiGroup& group);
  /// The hierarchy of `group` with its communicators, made on first use: collective over the
  /// group, a bounded barrier over it (Timeout naming the members that did not arrive; after
  /// it every member is inside the creation), then two MPI_Comm_split of its communicator.
  [[nodiscard]] Status get(AxisSet axes, const MpiGroup& group, const HostHierarchy*& out);

  /// Leaves the communicators unfreed at destruction (after a Timeout).
  void abandon() { abandoned_ = true; }

 private:
  HostHierarchy& entry(AxisSet axes, const MpiGroup& group);

  std::vector<int> hostOfRank_;
  bool abandoned_ = false;
  std::unordered_map<std::uint32_t, HostHierarchy> hierarchies_;
};

}  // namespace chimera::detail
