// SPDX-License-Identifier: Apache-2.0
// Timing of one measured operation: untimed warm-up, a barrier, then the timed loop, with
// the loop's total and every iteration's own time recorded (for the mean and the median).
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "chimera/status.hpp"

namespace chimera::bench {

/// What a timed loop measured on this rank.
struct TimingSamples {
  /// Wall time of the whole timed loop, seconds.
  double loopSeconds = 0.0;
  /// Wall time of each timed iteration, seconds.
  std::vector<double> iterationSeconds;
};

/// loopSeconds / number of iterations (0 when there were none).
double meanIterationSeconds(const TimingSamples& samples);
/// Median of the iteration times (mean of the two middle ones for an even count; 0 when empty).
double medianIterationSeconds(const TimingSamples& samples);

/// Runs `operation` `warmupIters` times, then `barrier`, then `iters` timed times. Stops at
/// and returns the first failing Status (of the operation or the barrier).
[[nodiscard]] Status timeLoop(int warmupIters, int iters, const std::function<Status()>& barrier,
                              const std::function<Status()>& operation, TimingSamples& out);

}  // namespace chimera::bench
