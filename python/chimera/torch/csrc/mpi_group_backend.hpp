// SPDX-License-Identifier: Apache-2.0
// The bridge between torch.distributed's process groups (arbitrary lists of world ranks,
// created only by their members) and chimera's MPI backend (bound to one mesh over one
// communicator). Free of torch headers, so it compiles against chimera's internals alone.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "chimera/backend.hpp"
#include "chimera/status.hpp"
#include "mpi_point_to_point.hpp"

namespace chimera::torch_ext {

/// Rank and size of MPI_COMM_WORLD, initialising MPI (MPI_THREAD_MULTIPLE, for asynchronous
/// ops on a thread per process group) when nobody has.
[[nodiscard]] Status mpiWorldOf(int& rank, int& size);

/// Whether MPI is initialised with MPI_THREAD_MULTIPLE (false when MPI was initialised by
/// someone else at a lower level: asynchronous ops then complete before they return).
bool mpiThreadMultiple();

/// Finalises MPI if this extension or chimera initialised it (at interpreter exit).
void finalizeExtensionMpi();

/// Creates a chimera MPI backend over exactly the world ranks `worldRanks` (group order: the
/// communicator rank of `worldRanks[i]` is i), with a one-axis mesh "group" of that size.
/// Collective over those ranks only (MPI_Comm_create_group), so a torch sub-group is created
/// by its members alone. `tag` must be equal on the members and differ between groups whose
/// creations may overlap in time. InvalidArgument when the caller is not in `worldRanks`, a
/// rank is out of range or repeated, or `timeoutMs` is not positive. `timeoutMs` (the process
/// group's timeout) bounds every wait and `abortOnTimeout` says whether a Timeout ends the job;
/// the backend's other options come from the environment as createMpiBackend's. `p2p`: the
/// group's point-to-point channel, on its own duplicate of the communicator, bounded by the
/// same timeout.
[[nodiscard]] Status createGroupBackend(std::span<const int> worldRanks, int tag, std::int64_t timeoutMs,
                                        bool abortOnTimeout, std::unique_ptr<Backend>& out,
                                        std::unique_ptr<MpiPointToPoint>& p2p);

}  // namespace chimera::torch_ext
