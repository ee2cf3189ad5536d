// SPDX-License-Identifier: Apache-2.0
#include "backend/mpi/mpi_group.hpp"

#include "backend/mpi/mpi_util.hpp"
#include "common/check.hpp"
#include "common/log.hpp"

namespace chimera::detail {

MpiGroupCache::~MpiGroupCache() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized != 0) return;
  for (auto& [bits, group] : groups_) MPI_Comm_free(&group.comm);
}

Status MpiGroupCache::get(AxisSet axes, const MpiGroup*& out) {
  CHIMERA_CHECK_ARG(!axes.empty(), "empty axis set (mesh {})", mesh_.toString());
  CHIMERA_CHECK_ARG((axes.bits() & ~mesh_.allAxes().bits()) == 0, "axis set 0x{:x} names axes mesh {} does not have",
                    axes.bits(), mesh_.toString());
  if (auto it = groups_.find(axes.bits()); it != groups_.end()) {
    out = &it->second;
    return Status::ok();
  }
  MpiGroup group;
  group.size = mesh_.groupSize(axes);
  group.index = mesh_.groupIndex(rank_, axes);
  const int color = mesh_.groupColor(rank_, axes);
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_split(world_, color, group.index, &group.comm),
                                    fmt::format("MPI_Comm_split for axes {}", mesh_.axesName(axes))));
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_set_errhandler(group.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  int commSize = 0;
  int commRank = 0;
  MPI_Comm_size(group.comm, &commSize);
  MPI_Comm_rank(group.comm, &commRank);
  CHIMERA_ASSERT_EQ(commSize, group.size);
  CHIMERA_ASSERT_EQ(commRank, group.index);
  CHIMERA_LOG_DEBUG("mpi", "created communicator for axes {} (size {}, index {})", mesh_.axesName(axes), group.size,
                    group.index);
  out = &groups_.emplace(axes.bits(), group).first->second;
  return Status::ok();
}

}  // namespace chimera::detail
