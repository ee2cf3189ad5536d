// SPDX-License-Identifier: Apache-2.0
// Communicators of the MPI backend: one per mesh axis group, created on first use and cached.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

class FaultNotices;

/// A communicator over one group and the caller's place in it.
struct MpiGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  /// Ranks in the group.
  int size = 1;
  /// The caller's group index (its rank in `comm`, equal to Mesh::groupIndex).
  int index = 0;
  /// World rank of each member, by group index (names late peers in Timeout messages).
  std::vector<int> members;
  /// How long a wait on this group may go without progress before it is a Timeout.
  std::int64_t timeoutMs = 600000;
  /// "axes tp (world ranks 0, 1)": how errors name the group.
  std::string label = "group";
  /// The backend's fault notices, which waits on this group take in (fault_notice.hpp); none when null.
  FaultNotices* notices = nullptr;
  /// How a member asks a rank at fault to stand in for an agreement round on this group
  /// (fault_notice.hpp): the axis bits of a cached group, 0 for the cache's world; -1: it cannot.
  std::int64_t standInKey = -1;
};

/// The group of all world ranks over `comm` (index = world rank), labelled `label`, whose waits
/// take in `notices` (when given).
MpiGroup worldGroup(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, std::string label,
                    FaultNotices* notices = nullptr);

/// Cache of sub-communicators keyed by AxisSet, each made with
/// MPI_Comm_split(world, mesh.groupColor, mesh.groupIndex) and set to MPI_ERRORS_RETURN.
/// Creating one is collective over the world and starts with a bounded agreement over the
/// world on the axes (one small non-blocking MPI_Iallreduce), so that ranks asking for
/// different groups get Mismatch (or Timeout, when some ranks are busy elsewhere) and nothing
/// is cached, instead of a split that mixes groups. Frees them on destruction (unless MPI is
/// already finalised or the cache was abandoned after a failure).
class MpiGroupCache {
 public:
  /// `world` and `notices` must outlive the cache; `rank` is the caller's world rank. Axes that
  /// name no group of the mesh are announced through `notices` (fault_notice.hpp), which finds
  /// the groups its stand-ins are asked for here.
  MpiGroupCache(MPI_Comm world, Mesh mesh, int rank, std::int64_t timeoutMs, FaultNotices& notices);
  MpiGroupCache(const MpiGroupCache&) = delete;
  MpiGroupCache& operator=(const MpiGroupCache&) = delete;
  ~MpiGroupCache();

  /// The group along `axes` containing this rank, creating its communicator on first use.
  /// InvalidArgument when `axes` is empty or names axes the mesh lacks (announced to every
  /// rank: the group its peers wait in is unknown); BackendError when MPI fails.
  [[nodiscard]] Status get(AxisSet axes, const MpiGroup*& out);
  /// Creates the communicators along each of `groups` that do not exist yet, in the order
  /// given. Collective over the world when one is missing here: the ranks first agree (bounded)
  /// on the list of new groups, so that ranks asking for different lists all return Mismatch
  /// and none is created. Nothing is sent when every group exists. InvalidArgument when one of
  /// `groups` names axes the mesh lacks (announced to every rank, as by get).
  [[nodiscard]] Status createAll(std::span<const AxisSet> groups);
  /// True when the communicator along `axes` exists.
  bool contains(AxisSet axes) const { return groups_.contains(axes.bits()); }

  /// Leaves the communicators unfreed at destruction: after a Timeout, operations may still
  /// be pending on them.
  void abandon() { abandoned_ = true; }

 private:
  // Bounded agreement over the world on `axes` before a split.
  Status agreeOnAxes(AxisSet axes);
  // Bounded agreement over the world on the list of new groups `missing` before createAll splits any.
  Status agreeOnNewGroups(std::span<const AxisSet> missing);

  MPI_Comm world_;
  Mesh mesh_;
  int rank_;
  std::int64_t timeoutMs_;
  FaultNotices* notices_;
  MpiGroup worldGroup_;  // over world_, for the agreements before a split
  bool abandoned_ = false;
  std::unordered_map<std::uint32_t, MpiGroup> groups_;
};

}  // namespace chimera::detail
