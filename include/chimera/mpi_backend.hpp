// SPDX-License-Identifier: Apache-2.0
// The MPI backend's factories and options (stable API): host memory, on MPI_COMM_WORLD or
// on a communicator the framework owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// Rank and size of the MPI world, initialising MPI (MPI_Init_thread, funneled) if the caller
/// has not. A process that let chimera initialise MPI should call `finalizeMpi()` before exit.
[[nodiscard]] Status mpiWorld(int& rank, int& size);

/// Finalises MPI if chimera initialised it; otherwise does nothing.
void finalizeMpi();

/// The Status of an MPI return code, for code that makes MPI calls of its own beside chimera's
/// (a framework's process group): Ok for MPI_SUCCESS (0), else BackendError
/// "<what>: <MPI_Error_string> (MPI error <rc>)".
[[nodiscard]] Status mpiStatus(int rc, std::string_view what);

/// Which implementation the MPI backend's collectives run.
enum class MpiAlgorithm : std::uint8_t {
  Auto,          ///< per op and size, as measured best (docs/performance.md)
  PointToPoint,  ///< chimera's own: direct ReduceScatter/AllGather/AllReduce, pairwise AllToAll, scatter+ring Broadcast
  Ring,          ///< as PointToPoint, but ring ReduceScatter/AllGather/AllReduce (n-1 neighbour steps; fewer
                 ///< concurrent messages, for fabrics where fan-out costs more than steps)
  Library,       ///< the MPI library's collective (MPI_Allreduce, MPI_Reduce_scatter_block, ...)
  Hierarchical,  ///< as PointToPoint, but AllReduce/ReduceScatter/AllGather over a group that spans hosts run
                 ///< the hierarchical program (inside each host, across the hosts, inside again) at every size
};

/// Options of the MPI backend. A framework sets them in code; `fromEnvironment` gives the
/// defaults the environment variables override (what `createMpiBackend(mesh, out)` uses).
struct MpiBackendOptions {
  /// CHIMERA_MPI_ALGORITHM=auto|p2p|ring|library|hierarchical.
  MpiAlgorithm algorithm = MpiAlgorithm::Auto;
  /// Cross-rank argument agreement before each collective, and pairwise checks of
  /// point-to-point calls (CHIMERA_CHECK_ARGS=0|1, on by default in every build; see
  /// docs/reliability.md for its cost and what goes wrong without it).
  bool checkArgs = true;
  /// Segment size in bytes of chimera's ReduceScatter (direct or ring), alone or inside
  /// AllReduce (CHIMERA_MPI_SEGMENT_BYTES, default 1M). See docs/performance.md.
  std::size_t segmentBytes = std::size_t{1} << 20;
  /// How long, in milliseconds, one wait inside a call may go without progress before the call
  /// returns Timeout and the backend becomes unusable (CHIMERA_TIMEOUT_MS, default 600000).
  std::int64_t timeoutMs = 600000;
  /// After a Timeout, or any failure that leaves the backend unusable (its peers may be left
  /// waiting), log the rank, the call, the group and the ranks it waited for, then end the whole
  /// job: MPI_Abort(MPI_COMM_WORLD, 3), making no further call
  /// (CHIMERA_ABORT_ON_TIMEOUT=0|1, default off: the call returns the Timeout and the
  /// application decides; chimera's tools and examples turn it on). docs/reliability.md.
  bool abortOnTimeout = false;
  /// Boxes of grouped transfers between ranks of one host move in one copy, read by the
  /// receiver straight from the sender's tensor (process_vm_readv, where the host lets ranks
  /// read each other's memory), instead of packed, sent and unpacked
  /// (CHIMERA_MPI_PEER_READ=0|1, default on; docs/performance.md).
  bool peerRead = true;
  /// Most elements one MPI message or library call carries (MPI's count is an int); larger
  /// transfers are split into messages of at most this many. Tests lower it to exercise the
  /// split without gigabyte buffers.
  std::size_t maxMessageCount = static_cast<std::size_t>(std::numeric_limits<int>::max());

  /// The defaults overridden by the environment variables above. InvalidArgument naming the
  /// variable when one is malformed.
  [[nodiscard]] static Status fromEnvironment(MpiBackendOptions& out);
};

/// The CHIMERA_MPI_ALGORITHM spelling of `algorithm`: "auto", "p2p", "ring", "library", "hierarchical".
std::string_view mpiAlgorithmName(MpiAlgorithm algorithm);

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
/// - `CHIMERA_MPI_ALGORITHM=auto|p2p|ring|library|hierarchical`: per-op choice by measured
///   thresholds, hierarchical over groups that span hosts (default), chimera's own
///   point-to-point algorithms (direct exchange), the same with ring
///   ReduceScatter/AllGather/AllReduce, the MPI library's collectives, or the direct exchange
///   with the hierarchical program for every AllReduce/ReduceScatter/AllGather over a group
///   that spans hosts (docs/performance.md, "Across hosts").
/// - `CHIMERA_MPI_SEGMENT_BYTES` (default `1M`): segment size of chimera's ReduceScatter.
/// - `CHIMERA_ABORT_ON_TIMEOUT=0|1` (default 0): `MpiBackendOptions::abortOnTimeout`.
[[nodiscard]] Status createMpiBackend(const Mesh& mesh, std::unique_ptr<Backend>& out);

/// createMpiBackend with explicit options (the environment is not read).
[[nodiscard]] Status createMpiBackend(const Mesh& mesh, const MpiBackendOptions& options,
                                      std::unique_ptr<Backend>& out);

/// Creates the MPI backend on a communicator the caller owns, e.g. the world group a framework
/// created: `comm` points to an `MPI_Comm` (passed by address so that this header needs no
/// mpi.h); its ranks are the mesh's world ranks, in order, and its size must equal
/// `mesh.size()`. The backend works on duplicates of it (`MPI_Comm_dup`), so the caller's
/// communicator stays the caller's and must only outlive the call. Collective over `comm`.
/// InvalidArgument when `comm` is null or MPI_COMM_NULL, or sizes differ.
[[nodiscard]] Status createMpiBackendOnComm(const void* comm, const Mesh& mesh, const MpiBackendOptions& options,
                                            std::unique_ptr<Backend>& out);

/// Creates the MPI backend over some ranks of MPI_COMM_WORLD laid out as `mesh`: the rank of mesh
/// coordinate index i (row-major) is world rank `worldRanks[i]`, in any order (a framework's
/// sub-mesh, or a mesh that is not the world in row-major order). Collective over those ranks
/// only; the others do not call it. The ranks first meet with point-to-point messages bounded
/// by `options.timeoutMs` (Timeout naming the world ranks that did not arrive), then make their
/// communicator (MPI_Comm_create_group), of which the backend works on duplicates. Initialises
/// MPI as `mpiWorld` when nobody has. InvalidArgument when `worldRanks` and the mesh differ in
/// size, a rank is out of range or repeated, or the caller is not one of them.
[[nodiscard]] Status createMpiBackendOnRanks(std::span<const int> worldRanks, const Mesh& mesh,
                                             const MpiBackendOptions& options, std::unique_ptr<Backend>& out);

}  // namespace chimera
