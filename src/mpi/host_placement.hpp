// SPDX-License-Identifier: Apache-2.0
// Where the ranks of an MPI world run (private): which ranks share a host, found once at backend
// creation from each rank's host key (common/host_identity.hpp), the same answer on every rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Collective over `comm` (`rank` of `size`), bounded by `timeoutMs`: `out[r]` is the host of
/// world rank r, hosts numbered 0, 1, ... in the order of their lowest rank (Backend::hostOfRank).
[[nodiscard]] Status findHosts(MPI_Comm comm, int rank, int size, std::int64_t timeoutMs, std::vector<int>& out);

}  // namespace chimera::detail
