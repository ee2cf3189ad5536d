// SPDX-License-Identifier: Apache-2.0
// Ending the whole job from one rank (private): what a backend does after a Timeout, or a
// failure that leaves it unusable, when its options say so (`abortOnTimeout`,
// CHIMERA_ABORT_ON_TIMEOUT). The peers still waiting for this rank would otherwise wait until
// their own timeouts and then go on into calls nobody can complete.
#pragma once

#include <chrono>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Exit status of a job a backend ends after a Timeout or a failure that leaves it unusable,
/// with `abortOnTimeout` on (MpiBackendOptions, NcclBackendOptions; CHIMERA_ABORT_ON_TIMEOUT):
/// the MPI_Abort error code, or the process's exit status without MPI.
inline constexpr int kJobAbortExitCode = 3;

/// Reads CHIMERA_ABORT_ON_TIMEOUT (0/1/on/off/true/false) into `out`, leaving it as it is when
/// unset. InvalidArgument naming the variable when malformed.
[[nodiscard]] Status abortOnTimeoutFromEnv(bool& out);

/// How long endJob waits between its log line and the abort, for a caller whose waits give up
/// after `timeout` without progress: the timeout plus 1 s, at most 5 s. A peer whose own
/// progress stopped when this rank stopped serving it (this rank no longer drives MPI) gives
/// up within one timeout, and logs its own line before the abort tears it down.
[[nodiscard]] std::chrono::milliseconds jobEndGrace(std::chrono::milliseconds timeout);

/// Logs `failure` (critical, flushed, naming the rank, the call, the group and the ranks it
/// waited for, as the failure says them), waits jobEndGrace(timeout) so that peers giving up
/// on the same stall log theirs too, and ends the job: MPI_Abort(MPI_COMM_WORLD,
/// kJobAbortExitCode) when MPI is initialised, else _Exit(kJobAbortExitCode), which a launcher
/// such as torchrun turns into the end of the job. Makes no other call into MPI or NCCL.
[[noreturn]] void endJob(std::string_view subsystem, int rank, const Status& failure,
                         std::chrono::milliseconds timeout);

/// MPI_Finalize bounded by CHIMERA_TIMEOUT_MS (default 600000; a malformed value counts as the
/// default): MPI_Finalize waits for every rank, so a peer that stalled or died, or an operation
/// abandoned after a Timeout, would keep it waiting without end; past the limit the job ends
/// (watchedBlockingCall). Without MPI, or with MPI already finalised, does nothing.
void watchedFinalize();

}  // namespace chimera::detail
