// SPDX-License-Identifier: Apache-2.0
// Where the ranks of an MPI world run (private): which ranks share a host, found once at backend
// creation from each rank's host name and boot id, the same answer on every rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::detail {

/// A hash of this machine's host name and boot id: equal on two processes exactly when they run
/// on one host (a container or network namespace with its own host name counts as its own host).
std::uint64_t thisHostKey();

/// Collective over `comm` (`rank` of `size`), bounded by `timeoutMs`: `out[r]` is the host of
/// world rank r, hosts numbered 0, 1, ... in the order of their lowest rank (Backend::hostOfRank).
[[nodiscard]] Status findHosts(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, std::vector<int>& out);

}  // namespace chimera::detail
