// SPDX-License-Identifier: Apache-2.0
// Timing of one measured operation: untimed warm-up, a barrier, then the timed loop, with
// the loop's total and every iteration's own time recorded (for the mean and the median).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"
#include "job/stall_watchdog.hpp"

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

/// The process's stall watchdog (nullptr: none), which every timed loop names its iterations
/// to: a peer that stalls in a plain MPI call (which has no timeout) ends the job.
void setStallWatchdog(detail::StallWatchdog* watchdog);
/// Names the stretch of waiting work that starts now to the watchdog, if there is one (`what`
/// must stay alive until the next stretch; `iteration` -1 for none).
void enterStretch(std::string_view what, int iteration = -1);
/// Ends the current stretch (local work follows, which the watchdog does not bound).
void leaveStretch();

/// One stretch for the lifetime of the object: a call that waits for every rank.
class Stretch {
 public:
  explicit Stretch(std::string_view what) { enterStretch(what); }
  ~Stretch() { leaveStretch(); }
  Stretch(const Stretch&) = delete;
  Stretch& operator=(const Stretch&) = delete;
};

/// Runs `operation` `warmupIters` times, then `barrier`, then `iters` timed times, each
/// iteration a stretch of the watchdog named after `what` (left when the loop ends). Stops at and returns the first
/// failing Status (of the operation or the barrier).
[[nodiscard]] Status timeLoop(const std::string& what, int warmupIters, int iters,
                              const std::function<Status()>& barrier, const std::function<Status()>& operation,
                              TimingSamples& out);

}  // namespace chimera::bench
