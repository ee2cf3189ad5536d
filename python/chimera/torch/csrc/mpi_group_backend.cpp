// SPDX-License-Identifier: Apache-2.0
// A chimera MPI backend over a communicator of chosen world ranks (see mpi_group_backend.hpp),
// made with the public createMpiBackendOnComm on a communicator only the group creates.
#include "mpi_group_backend.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <set>
#include <utility>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/mpi_backend.hpp"
#include "core/check.hpp"
#include "job/job_end.hpp"
#include "job/stall_watchdog.hpp"

namespace chimera::torch_ext {

namespace {
bool gExtensionInitializedMpi = false;
}  // namespace

Status mpiWorldOf(int& rank, int& size) {
  int initialized = 0;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Initialized(&initialized), "MPI_Initialized"));
  if (initialized == 0) {
    // Asynchronous ops run on a thread per process group while other groups (and chimera's
    // Session) use MPI on the caller's thread.
    int provided = 0;
    CHIMERA_RETURN_IF_ERROR(
        mpiStatus(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
    gExtensionInitializedMpi = true;
  }
  return mpiWorld(rank, size);
}

bool mpiThreadMultiple() {
  int initialized = 0;
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || initialized == 0) return false;
  return MPI_Query_thread(&provided) == MPI_SUCCESS && provided == MPI_THREAD_MULTIPLE;
}

void finalizeExtensionMpi() {
  finalizeMpi();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (gExtensionInitializedMpi && finalized == 0) detail::watchedFinalize();
  gExtensionInitializedMpi = false;
}

namespace {

// A communicator over `ranks` of MPI_COMM_WORLD, made by those ranks alone. MPI has no bounded
// form: a member that never arrives ends the job after `timeoutMs` (watchedBlockingCall) instead
// of leaving the others waiting.
Status groupCommunicator(std::span<const int> ranks, int tag, int worldRank, std::int64_t timeoutMs, MPI_Comm& out) {
  MPI_Group world = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  CHIMERA_RETURN_IF_ERROR(mpiStatus(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group"));
  const std::vector<int> list(ranks.begin(), ranks.end());
  Status status =
      mpiStatus(MPI_Group_incl(world, static_cast<int>(list.size()), list.data(), &group), "MPI_Group_incl");
  if (status.isOk())
    status =
        mpiStatus(detail::watchedBlockingCall(worldRank, std::chrono::milliseconds(timeoutMs),
                                              "MPI_Comm_create_group of a torch process group",
                                              [&] { return MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &out); }),
                  "MPI_Comm_create_group");
  if (status.isOk()) status = mpiStatus(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  MPI_Group_free(&world);
  return status;
}

}  // namespace

Status createGroupBackend(std::span<const int> worldRanks, int tag, std::int64_t timeoutMs, bool abortOnTimeout,
                          std::unique_ptr<Backend>& out, std::unique_ptr<MpiPointToPoint>& p2p) {
  int worldRank = 0;
  int worldSize = 0;
  CHIMERA_RETURN_IF_ERROR(mpiWorld(worldRank, worldSize));
  CHIMERA_CHECK_ARG(!worldRanks.empty(), "a process group needs at least one rank");
  CHIMERA_CHECK_ARG(timeoutMs > 0, "a process group's timeout of {} ms", timeoutMs);
  int groupRank = -1;
  std::set<int> seen;
  for (std::size_t i = 0; i < worldRanks.size(); ++i) {
    const int r = worldRanks[i];
    CHIMERA_CHECK_ARG(r >= 0 && r < worldSize, "group rank list names rank {}, but the MPI world has {} ranks", r,
                      worldSize);
    CHIMERA_CHECK_ARG(seen.insert(r).second, "group rank list names rank {} twice", r);
    if (r == worldRank) groupRank = static_cast<int>(i);
  }
  CHIMERA_CHECK_ARG(groupRank >= 0, "MPI rank {} is not in the group it is creating", worldRank);
  int tagUpperBound = 32767;
  {
    void* value = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found);
    if (found != 0 && value != nullptr) tagUpperBound = *static_cast<int*>(value);
  }
  const int safeTag = tag < 0 ? -(tag + 1) % tagUpperBound : tag % tagUpperBound;

  // The process group's timeout and abort switch are resolved by chimera.torch (options.py);
  // the rest of the backend's options come from the environment, as chimera's own do.
  MpiBackendOptions options;
  CHIMERA_RETURN_IF_ERROR(MpiBackendOptions::fromEnvironment(options));
  options.timeoutMs = timeoutMs;
  options.abortOnTimeout = abortOnTimeout;
  MPI_Comm comm = MPI_COMM_NULL;
  CHIMERA_RETURN_IF_ERROR(groupCommunicator(worldRanks, safeTag, worldRank, options.timeoutMs, comm));
  // The backend works on duplicates of the group's communicator (collective over the group).
  Status status = createMpiBackendOnComm(&comm, Mesh::flat(static_cast<int>(worldRanks.size()), "group"), options, out);
  if (status.isOk()) status = MpiPointToPoint::create(&comm, options.timeoutMs, p2p);
  MPI_Comm_free(&comm);
  return status;
}

}  // namespace chimera::torch_ext
