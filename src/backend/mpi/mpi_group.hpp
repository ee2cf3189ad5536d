// SPDX-License-Identifier: Apache-2.0
// Communicators of the MPI backend: one per mesh axis group, created on first use and cached.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <unordered_map>
#include <utility>

#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// A communicator over one group and the caller's place in it.
struct MpiGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  /// Ranks in the group.
  int size = 1;
  /// The caller's group index (its rank in `comm`, equal to Mesh::groupIndex).
  int index = 0;
};

/// Cache of sub-communicators keyed by AxisSet, each made with
/// MPI_Comm_split(world, mesh.groupColor, mesh.groupIndex) and set to MPI_ERRORS_RETURN.
/// Creating one is collective over the world. Frees them on destruction (unless MPI is
/// already finalised).
class MpiGroupCache {
 public:
  /// `world` must outlive the cache; `rank` is the caller's world rank.
  MpiGroupCache(MPI_Comm world, Mesh mesh, int rank) : world_(world), mesh_(std::move(mesh)), rank_(rank) {}
  MpiGroupCache(const MpiGroupCache&) = delete;
  MpiGroupCache& operator=(const MpiGroupCache&) = delete;
  ~MpiGroupCache();

  /// The group along `axes` containing this rank, creating its communicator on first use.
  /// InvalidArgument when `axes` is empty or names axes the mesh lacks; BackendError when MPI fails.
  [[nodiscard]] Status get(AxisSet axes, const MpiGroup*& out);
  /// True when the communicator along `axes` exists.
  bool contains(AxisSet axes) const { return groups_.contains(axes.bits()); }

 private:
  MPI_Comm world_;
  Mesh mesh_;
  int rank_;
  std::unordered_map<std::uint32_t, MpiGroup> groups_;
};

}  // namespace chimera::detail
