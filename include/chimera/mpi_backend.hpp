// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// Rank and size of the MPI world, initialising MPI (MPI_Init_thread, funneled) if the caller
/// has not. A process that let chimera initialise MPI should call `finalizeMpi()` before exit.
[[nodiscard]] Status mpiWorld(int& rank, int& size);

/// Finalises MPI if chimera initialised it; otherwise does nothing.
void finalizeMpi();

/// Creates the MPI backend (host memory) over MPI_COMM_WORLD for `mesh`, whose size must
/// equal the world size. Sub-communicators per axis group are created on first use and
/// cached; creating one is collective over the world, so every rank must use the same
/// groups in the same order (as with any collective): ranks asking for different new groups
/// get Mismatch and nothing is cached. InvalidArgument on a mesh/world mismatch.
///
/// Environment (read here; InvalidArgument naming the variable when malformed):
/// - `CHIMERA_CHECK_ARGS=0|1`: agree on (collective, count, dtype, op, root, "my arguments
///   are valid") across the group before every collective, so that mismatched or bad
///   arguments return Mismatch/InvalidArgument on every rank instead of hanging or returning
///   wrong data. Default 1 (one small exchange per call; docs/reliability.md). With it off, a
///   rank-local argument error returns on that rank only and its peers wait for it until
///   the timeout (as in NCCL), and mismatched calls may return wrong data.
/// - `CHIMERA_TIMEOUT_MS` (default 600000): every wait inside a call is bounded; a call that
///   makes no progress for this long returns Timeout naming the call, the group and the
///   ranks still missing, and the backend is unusable afterwards (every later call returns
///   the stored error; the process should exit, as after NCCL's abort). Point-to-point
///   calls (send, recv, groupedP2P) are checked pairwise: each pair exchanges the list of
///   its transfers first, so differing counts, dtypes or numbers of messages give Mismatch at
///   both ends; a rank-local error still returns at once on that rank.
/// - `CHIMERA_MPI_ALGORITHM=auto|p2p|ring|library`: per-op choice by measured thresholds
///   (default), chimera's own point-to-point algorithms (direct exchange), the same with
///   ring ReduceScatter/AllGather/AllReduce, or the MPI library's collectives.
/// - `CHIMERA_MPI_SEGMENT_BYTES` (default `1M`): segment size of chimera's ReduceScatter.
[[nodiscard]] Status createMpiBackend(const Mesh& mesh, std::unique_ptr<Backend>& out);

}  // namespace chimera
