// SPDX-License-Identifier: Apache-2.0
// chimera-bench: nccl-tests-style benchmark of chimera's MPI backend against plain MPI, of
// chains as written against the planner's fused plan (--scenario, --chain), and --calibrate.
// Usage and output are described in docs/benchmarks.md and by `chimera-bench -h`.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_context.hpp"
#include "calibrate.hpp"
#include "collective_sweep.hpp"
#include "options.hpp"
#include "scenario_sweep.hpp"
#include "timing.hpp"

namespace chimera::bench {
namespace {

constexpr int kExitWrong = 1;
constexpr int kExitError = 2;

/// Everything between MPI_Init and MPI_Finalize; returns the exit status (same on every rank).
int run(const std::vector<std::string>& args, int rank) {
  const auto fail = [rank](const Status& status) {
    if (rank == 0) std::fprintf(stderr, "chimera-bench: error: %s\n", status.toString().c_str());
    return kExitError;
  };
  Options options;
  if (const Status status = parseOptions(args, options); !status.isOk()) return fail(status);
  if (options.help) {
    if (rank == 0) std::fputs(usageText().c_str(), stdout);
    return 0;
  }
  if (options.calibrate) {
    if (const Status status = runCalibration(options); !status.isOk()) return fail(status);
    return 0;
  }
  if (options.chainMode()) {
    ScenarioOutcome outcome;
    if (const Status status = runScenarioSweep(options, outcome); !status.isOk()) return fail(status);
    return outcome.anyWrong ? kExitWrong : 0;
  }
  std::unique_ptr<BenchContext> context;
  if (const Status status = BenchContext::create(options, context); !status.isOk()) return fail(status);
  SweepOutcome outcome;
  if (const Status status = runCollectiveSweep(options, *context, outcome); !status.isOk()) return fail(status);
  return outcome.anyWrong ? kExitWrong : 0;
}

}  // namespace
}  // namespace chimera::bench

int main(int argc, char** argv) {
  // A stuck job ends (docs/reliability.md): a Timeout in a chimera call ends it at once, a
  // stall in one of the plain MPI calls (baseline, barriers) when the watchdog's limit passes.
  setenv("CHIMERA_ABORT_ON_TIMEOUT", "1", /*overwrite=*/0);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::chrono::milliseconds limit{};
  if (const chimera::Status status = chimera::detail::toolStallLimit(limit); !status.isOk()) {
    if (rank == 0) std::fprintf(stderr, "chimera-bench: error: %s\n", status.toString().c_str());
    MPI_Finalize();
    return 2;
  }
  int exitCode = 0;
  {
    chimera::detail::StallWatchdog watchdog(rank, limit);
    chimera::bench::setStallWatchdog(&watchdog);
    const std::vector<std::string> args(argv + 1, argv + argc);
    exitCode = chimera::bench::run(args, rank);
    chimera::bench::setStallWatchdog(nullptr);
  }
  MPI_Finalize();
  return exitCode;
}
