// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "chimera/backend.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"

// The NCCL backend exists when chimera was built with CUDA (CHIMERA_HAS_CUDA is defined).
// Its buffers are device memory; `Backend::stream()` is a cudaStream_t. Operations are
// enqueued on that stream and return without waiting; `synchronize()` waits, polls NCCL for
// asynchronous errors, and aborts the communicators when the stream makes no progress for
// CHIMERA_TIMEOUT_MS milliseconds (default 600000), returning Timeout.
// Sub-communicators per axis group come from ncclCommSplit of the world communicator, made
// on first use and cached: like any collective, every rank must first-use the same groups
// in the same order.

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
/// index among the ranks on its node (MPI_Comm_split_type shared), rank 0 creates the unique
/// id and broadcasts it. Collective over MPI_COMM_WORLD; MPI must be initialised (e.g. by
/// `mpiWorld()`). Every rank gets the same verdict: InvalidArgument when MPI is not
/// initialised, mesh.size() differs from the world size, or a node has more ranks than
/// GPUs; BackendError when CUDA, NCCL or MPI fail; Unsupported when chimera was built
/// without MPI (use the unique-id overload then).
[[nodiscard]] Status createNcclBackendMpi(const Mesh& mesh, std::unique_ptr<Backend>& out);

}  // namespace chimera
