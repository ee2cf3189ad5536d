// SPDX-License-Identifier: Apache-2.0
// The collective mode of chimera-bench (-C): for every dtype x op x size, check ours out of
// place, the baseline and ours in place once each (-c 1), time all three, agree over ranks,
// print a row (rank 0), and at the end write --json. Other modes (scenarios) get their own file next to this one.
#pragma once

#include <vector>

#include "bench_context.hpp"
#include "options.hpp"
#include "report.hpp"

namespace chimera::bench {

/// What a sweep produced (identical on every rank).
struct SweepOutcome {
  /// The rows, in the order they were printed.
  std::vector<ResultRow> rows;
  /// Some element of ours (out-of-place or in-place) or of the baseline was wrong on some rank.
  bool anyWrong = false;
};

/// Runs the sweep the options describe. Collective over MPI_COMM_WORLD; a failure is
/// returned on every rank (agreed), never left hanging on one.
[[nodiscard]] Status runCollectiveSweep(const Options& options, BenchContext& context, SweepOutcome& out);

}  // namespace chimera::bench
