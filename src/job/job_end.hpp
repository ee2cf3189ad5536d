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

/// Reads CHIMERA_ABORT_ON_TIMEOUT (0/1/on/off/true/false) into `out`, leaving it as it is when
/// unset. InvalidArgument naming the variable when malformed.
[[nodiscard]] Status abortOnTimeoutFromEnv(bool& out);

/// How long endJob waits between its log line and the abort.
inline constexpr std::chrono::milliseconds kJobEndGrace{1000};

/// Logs `failure` (critical, flushed, naming the rank, the call, the group and the ranks it
/// waited for, as the failure says them), waits kJobEndGrace so that peers giving up on the
/// same stall log theirs too, and ends the job: MPI_Abort(MPI_COMM_WORLD,
/// kJobAbortExitCode) when MPI is initialised, else _Exit(kJobAbortExitCode), which a launcher
/// such as torchrun turns into the end of the job. Makes no other call into MPI or NCCL.
[[noreturn]] void endJob(std::string_view subsystem, int rank, const Status& failure);

}  // namespace chimera::detail
