// SPDX-License-Identifier: Apache-2.0
// The one MPI exchange of chimera.torch's rendezvous (python/chimera/torch/rendezvous.py):
// every rank's bytes to every rank over MPI_COMM_WORLD, bounded by a deadline, before any
// torch store exists. Free of torch headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::torch_ext {

/// Gathers every world rank's `mine` on every rank, in rank order, into `out` (initialising MPI
/// as mpiWorldOf does). Collective over MPI_COMM_WORLD (MPI_Iallgather of the lengths, then
/// MPI_Iallgatherv of the bytes). Timeout "<what>: ..." when the exchange has not completed
/// within `timeoutMs` (a rank that never calls it, or stalls); the abandoned buffers are kept
/// alive, since MPI cannot cancel a collective and may still write them. InvalidArgument for
/// more than INT_MAX bytes or a timeout <= 0; BackendError when MPI reports a failure.
[[nodiscard]] Status mpiAllGatherBytes(std::string_view mine, std::int64_t timeoutMs, std::string_view what,
                                       std::vector<std::string>& out);

}  // namespace chimera::torch_ext
