// SPDX-License-Identifier: Apache-2.0
// Implements endJob: log, then MPI_Abort (or _Exit without MPI).
#include "job/job_end.hpp"

#if defined(CHIMERA_HAS_MPI)
#include <mpi.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/env.hpp"
#include "common/log.hpp"
#include "job/stall_watchdog.hpp"

namespace chimera::detail {

Status abortOnTimeoutFromEnv(bool& out) { return readEnvSwitch("CHIMERA_ABORT_ON_TIMEOUT", out, out); }

std::chrono::milliseconds jobEndGrace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout + std::chrono::milliseconds(1000), std::chrono::milliseconds(1000),
                    std::chrono::milliseconds(5000));
}

void endJob(std::string_view subsystem, int rank, const Status& failure, std::chrono::milliseconds timeout) {
  const auto log = logger(subsystem);
  log->critical("rank {} cannot go on: {}; ending the job (exit status {}; abortOnTimeout, CHIMERA_ABORT_ON_TIMEOUT)",
                rank, failure.toString(), kJobAbortExitCode);
  log->flush();
  std::fflush(stdout);
  std::fflush(stderr);
  // The peers that wait on the same stalled rank, or on this one now that it has stopped
  // serving them, time out within one timeout: let them log theirs before the launcher tears
  // the job down.
  std::this_thread::sleep_for(jobEndGrace(timeout));
#if defined(CHIMERA_HAS_MPI)
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) MPI_Abort(MPI_COMM_WORLD, kJobAbortExitCode);
#endif
  std::_Exit(kJobAbortExitCode);
}

void watchedFinalize() {
#if defined(CHIMERA_HAS_MPI)
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized == 0 || finalized != 0) return;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::int64_t timeoutMs = 600000;
  if (!timeoutMsFromEnv(timeoutMs).isOk()) timeoutMs = 600000;
  (void)watchedBlockingCall(rank, std::chrono::milliseconds(timeoutMs),
                            "MPI_Finalize (it waits for every rank to finalise)", [] { return MPI_Finalize(); });
#endif
}

}  // namespace chimera::detail
