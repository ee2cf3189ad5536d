// SPDX-License-Identifier: Apache-2.0
// The chain mode of chimera-bench (--scenario NAME|all, or --chain/--from/--consume/--mesh):
// for every scenario x dtype x size, run the chain as written (ChainMode::Baseline) and the
// planner's fused plan (ChainMode::Fused) through one Executor, check the fused consumed
// output against the baseline's element by element on every rank (-c 1), time both
// interleaved, agree over ranks, print a row (rank 0), and at the end write --json.
#pragma once

#include <vector>

#include "options.hpp"
#include "scenario_report.hpp"

namespace chimera::bench {

/// What a chain sweep produced (identical on every rank).
struct ScenarioOutcome {
  /// The rows, in the order they were printed.
  std::vector<ScenarioRow> rows;
  /// Some fused element differed from the baseline's on some rank.
  bool anyWrong = false;
};

/// Runs the chain sweep the options describe. Collective over MPI_COMM_WORLD; a failure is
/// returned on every rank (agreed), never left hanging on one.
[[nodiscard]] Status runScenarioSweep(const Options& options, ScenarioOutcome& out);

}  // namespace chimera::bench
