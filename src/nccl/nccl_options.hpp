// SPDX-License-Identifier: Apache-2.0
// Settings of the NCCL backend and their environment variables (private). CUDA-free, so
// the parsing is unit-testable on any machine.
#pragma once

#include <chrono>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Settings of an NCCL backend.
struct NcclBackendOptions {
  /// Bound on every wait: communicator creation, split, enqueue of a collective or group,
  /// finalize/destroy, and synchronize() on a stream that stops progressing. Past it every
  /// communicator of the backend is aborted.
  std::chrono::milliseconds timeout{600000};
  /// AllToAll as grouped ncclSend/ncclRecv even where NCCL has ncclAlltoAll.
  bool groupedAllToAll = false;
  /// Cross-rank argument agreement before every collective (one small extra allreduce and a
  /// wait for the stream): Mismatch on every rank instead of a hang.
  bool checkArgs = false;
  /// End the whole job after a Timeout (job/job_end.hpp).
  bool abortOnTimeout = false;
};

/// Reads CHIMERA_TIMEOUT_MS (timeoutMsFromEnv, shared with the MPI backend), CHIMERA_NCCL_ALLTOALL (native | grouped)
/// and CHIMERA_CHECK_ARGS (0/1/on/off/true/false; default on in debug builds) into `out`. InvalidArgument quoting the
/// text when one is malformed.
[[nodiscard]] Status ncclBackendOptionsFromEnv(NcclBackendOptions& out);

}  // namespace chimera::detail
