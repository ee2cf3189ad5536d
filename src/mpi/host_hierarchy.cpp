// SPDX-License-Identifier: Apache-2.0
// Implements the cached host and lane communicators of the hierarchical collectives.
#include "mpi/host_hierarchy.hpp"

#include <fmt/format.h>

#include <string>

#include "common/log.hpp"
#include "core/check.hpp"
#include "mpi/bounded_wait.hpp"
#include "mpi/mpi_util.hpp"

namespace chimera::detail {
namespace {

std::string worldRanks(const MpiGroup& group, const std::vector<int>& members) {
  std::string text;
  for (const int m : members)
    text += (text.empty() ? "" : ", ") + std::to_string(group.members[static_cast<std::size_t>(m)]);
  return text;
}

// `comm` (this member's part of a split) as an MpiGroup over the group members `members`.
Status subgroup(MPI_Comm comm, const MpiGroup& group, const std::vector<int>& members, int index, std::string label,
                MpiGroup& out) {
  out.comm = comm;
  out.size = static_cast<int>(members.size());
  out.index = index;
  out.timeoutMs = group.timeoutMs;
  out.notices = group.notices;
  out.members.clear();
  for (const int m : members) out.members.push_back(group.members[static_cast<std::size_t>(m)]);
  out.label = fmt::format("{} (world ranks {})", label, worldRanks(group, members));
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  int size = 0;
  int rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  CHIMERA_ASSERT_EQ(size, out.size);
  CHIMERA_ASSERT_EQ(rank, out.index);
  return Status::ok();
}

}  // namespace

HostHierarchyCache::~HostHierarchyCache() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0 || abandoned_) return;
  for (auto& [bits, hierarchy] : hierarchies_) {
    if (hierarchy.host.comm != MPI_COMM_NULL) MPI_Comm_free(&hierarchy.host.comm);
    if (hierarchy.lane.comm != MPI_COMM_NULL) MPI_Comm_free(&hierarchy.lane.comm);
  }
}

HostHierarchy& HostHierarchyCache::entry(AxisSet axes, const MpiGroup& group) {
  auto [it, added] = hierarchies_.try_emplace(axes.bits());
  if (added) {
    std::vector<int> hosts;
    hosts.reserve(group.members.size());
    for (const int r : group.members) hosts.push_back(hostOfRank_[static_cast<std::size_t>(r)]);
    it->second.layout = makeHostLayout(hosts);
  }
  return it->second;
}

const HostLayout& HostHierarchyCache::layout(AxisSet axes, const MpiGroup& group) { return entry(axes, group).layout; }

Status HostHierarchyCache::get(AxisSet axes, const MpiGroup& group, const HostHierarchy*& out) {
  HostHierarchy& hierarchy = entry(axes, group);
  out = &hierarchy;
  if (hierarchy.made) return Status::ok();
  const HostLayout& layout = hierarchy.layout;
  const auto me = static_cast<std::size_t>(group.index);
  const int host = layout.hostOf[me];
  const int local = layout.localIndex[me];
  MPI_Request request = MPI_REQUEST_NULL;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Ibarrier(group.comm, &request), "MPI_Ibarrier (host communicators)"));
  CHIMERA_RETURN_IF_ERROR(waitOne(group, request, kWholeGroup, Lends::Chimera,
                                  "creating the host and lane communicators of the hierarchical collectives"));
  MPI_Comm hostComm = MPI_COMM_NULL;
  MPI_Comm laneComm = MPI_COMM_NULL;
  CHIMERA_RETURN_IF_ERROR(
      mpiStatus(MPI_Comm_split(group.comm, host, group.index, &hostComm), "MPI_Comm_split (host communicator)"));
  hierarchy.host.comm = hostComm;  // owned from here: freed with the cache
  const bool inLane = layout.inLane(group.index);
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_split(group.comm, inLane ? local : MPI_UNDEFINED, host, &laneComm),
                                    "MPI_Comm_split (lane communicator)"));
  hierarchy.lane.comm = laneComm;
  CHIMERA_RETURN_IF_ERROR(subgroup(hostComm, group, layout.members[static_cast<std::size_t>(host)], local,
                                   fmt::format("{}, host {} of {}", group.label, host, layout.hosts()),
                                   hierarchy.host));
  if (inLane) {
    std::vector<int> lane;
    for (int h = 0; h < layout.hosts(); ++h) lane.push_back(layout.laneMember(h, local));
    CHIMERA_RETURN_IF_ERROR(
        subgroup(laneComm, group, lane, host,
                 fmt::format("{}, lane {} of {} across the hosts", group.label, local, layout.lanes), hierarchy.lane));
  }
  hierarchy.made = true;
  CHIMERA_LOG_DEBUG("mpi", "hierarchical collectives on {}: {} hosts, {} lanes", group.label, layout.hosts(),
                    layout.lanes);
  return Status::ok();
}

}  // namespace chimera::detail
