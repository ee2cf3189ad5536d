// SPDX-License-Identifier: Apache-2.0
// The NCCL backend's factories and options (stable API; installed only with CUDA): device
// memory, bootstrapped over MPI, from a unique id, or on a communicator the framework owns.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

// The NCCL backend exists when chimera was built with CUDA (CHIMERA_HAS_CUDA is defined).
// Its buffers are device memory, and the `Stream` every call takes is a cudaStream_t (nullptr
// the legacy default stream): the backend keeps no stream of its own. Operations are enqueued
// on the caller's stream and return without waiting; `synchronize(stream)` waits, polls NCCL
// for asynchronous errors, and aborts the communicators when the stream makes no progress for
// CHIMERA_TIMEOUT_MS milliseconds (default 600000), returning Timeout. Communicators are
// non-blocking: creation, splits, enqueues and teardown are bounded by the same timeout.
// Sub-communicators per axis group come from ncclCommSplit of the world communicator, made
// when the groups are created (or on a group's first use) and cached: like any collective,
// every rank must create the same groups in the same order. The NCCL library is the one
// loaded at run time (>= 2.18; older gives Unsupported at creation, never a load failure).

namespace chimera {

/// Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES).
inline constexpr std::size_t kNcclUniqueIdBytes = 128;

/// The rendezvous token every rank of one NCCL world must share (ncclUniqueId, as bytes).
struct NcclUniqueId {
  std::array<char, kNcclUniqueIdBytes> bytes{};
};

/// Options of the NCCL backend. A framework sets them in code; `fromEnvironment` gives the
/// defaults the environment variables override (what the factories without options use).
struct NcclBackendOptions {
  /// How long, in milliseconds, `synchronize()` waits for a stream that stops progressing
  /// before it aborts the communicators and returns Timeout (CHIMERA_TIMEOUT_MS, default 600000).
  std::uint64_t timeoutMs = 600000;
  /// AllToAll as grouped ncclSend/ncclRecv even where NCCL has ncclAlltoAll
  /// (CHIMERA_NCCL_ALLTOALL=grouped).
  bool groupedAllToAll = false;
  /// Cross-rank argument agreement before every collective: Mismatch on every rank instead of
  /// a hang, at one small allreduce and a wait per call (CHIMERA_CHECK_ARGS=0|1;
  /// `fromEnvironment` defaults it to on in chimera's debug builds).
  bool checkArgs = false;
  /// After a Timeout (the communicators are aborted), end the whole job as the MPI backend's
  /// option of the same name does: log, then MPI_Abort when MPI is initialised, else exit
  /// with exit status 3 (CHIMERA_ABORT_ON_TIMEOUT=0|1, default off).
  bool abortOnTimeout = false;

  /// The defaults overridden by the environment variables above. InvalidArgument naming the
  /// variable when one is malformed.
  [[nodiscard]] static Status fromEnvironment(NcclBackendOptions& out);
};

/// Creates a fresh unique id (ncclGetUniqueId) on the calling rank; distribute it to the
/// other ranks yourself. BackendError when NCCL fails (e.g. no usable network interface).
[[nodiscard]] Status createNcclUniqueId(NcclUniqueId& out);

/// Creates the NCCL backend for world rank `rank` of `mesh.size()` ranks without MPI, driving
/// CUDA device `device`. Collective: every rank calls it (from its own process or thread) with
/// the same `id` and an equal mesh; it returns once all have joined. A one-rank mesh is the
/// single-GPU case. InvalidArgument for an empty mesh, a rank or device out of range, or a
/// malformed CHIMERA_TIMEOUT_MS; BackendError when CUDA or NCCL fail.
[[nodiscard]] Status createNcclBackend(const Mesh& mesh, int rank, int device, const NcclUniqueId& id,
                                       std::unique_ptr<Backend>& out);

/// createNcclBackend with explicit options (the environment is not read).
[[nodiscard]] Status createNcclBackend(const Mesh& mesh, int rank, int device, const NcclUniqueId& id,
                                       const NcclBackendOptions& options, std::unique_ptr<Backend>& out);

/// Creates the NCCL backend on a world communicator the caller owns: `comm` points to an
/// `ncclComm_t` (passed by address so that this header needs no nccl.h) whose ranks are the
/// mesh's world ranks, on CUDA device `device` (the one the communicator was made on). The
/// backend splits a private copy from it (ncclCommSplit), so the caller's communicator stays
/// the caller's. Collective over `comm`. InvalidArgument when `comm` is null, its size is not
/// `mesh.size()`, or `device` is out of range; BackendError when NCCL fails.
[[nodiscard]] Status createNcclBackendOnComm(const void* comm, const Mesh& mesh, int device,
                                             const NcclBackendOptions& options, std::unique_ptr<Backend>& out);

/// Creates the NCCL backend over MPI_COMM_WORLD, one GPU per rank: the device is the rank's
/// index among the ranks on its node (those with its MPI processor name), rank 0 creates the
/// unique id and broadcasts it. Collective over MPI_COMM_WORLD; MPI must be initialised (e.g.
/// by `mpiWorld()`). Every MPI wait of the bootstrap is non-blocking and bounded by
/// CHIMERA_TIMEOUT_MS, as the MPI backend's are. Every rank gets the same verdict:
/// InvalidArgument when MPI is not initialised, mesh.size() differs from the world size, or a
/// node has more ranks than GPUs; BackendError when CUDA, NCCL or MPI fail; Timeout naming the
/// step on the ranks that waited when a rank does not arrive within the timeout; Unsupported
/// when chimera was built without MPI (use the unique-id overload then).
[[nodiscard]] Status createNcclBackendMpi(const Mesh& mesh, std::unique_ptr<Backend>& out);

/// Creates the NCCL backend for a rank started by a launcher without MPI (such as
/// `chimera-rank-launch`, or your own): reads CHIMERA_RANK, CHIMERA_WORLD_SIZE,
/// CHIMERA_LOCAL_RANK and CHIMERA_LOCAL_WORLD_SIZE (default: the global ones) and
/// CHIMERA_NCCL_UNIQUE_ID (the id as 256 hex digits), picks the device as
/// createNcclBackendMpi does (one visible GPU: device 0; else the local rank), and calls
/// createNcclBackend. Collective over the launched ranks. InvalidArgument naming the variable
/// when one is missing or malformed, or when mesh.size() differs from CHIMERA_WORLD_SIZE;
/// otherwise as createNcclBackend.
[[nodiscard]] Status createNcclBackendFromEnv(const Mesh& mesh, std::unique_ptr<Backend>& out);

/// The NCCL library loaded at run time: its version as "major.minor.patch" in `text` and
/// as NCCL's version code in `code`. Unsupported (with both filled) when it is older than
/// chimera needs (2.18); BackendError when ncclGetVersion fails.
[[nodiscard]] Status ncclLibraryVersion(std::string& text, int& code);

}  // namespace chimera
