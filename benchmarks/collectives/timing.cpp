// SPDX-License-Identifier: Apache-2.0
// Implements the timed loop: warm-up, barrier, per-iteration times for mean and median.
#include "timing.hpp"

#include <algorithm>

#include "core/check.hpp"

namespace chimera::bench {
namespace {

using Clock = std::chrono::steady_clock;

double secondsBetween(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

detail::StallWatchdog* gWatchdog = nullptr;

}  // namespace

void setStallWatchdog(detail::StallWatchdog* watchdog) { gWatchdog = watchdog; }

void enterStretch(std::string_view what, int iteration) {
  if (gWatchdog != nullptr) gWatchdog->enter(what, iteration);
}

void leaveStretch() {
  if (gWatchdog != nullptr) gWatchdog->leave();
}

double meanIterationSeconds(const TimingSamples& samples) {
  if (samples.iterationSeconds.empty()) return 0.0;
  return samples.loopSeconds / static_cast<double>(samples.iterationSeconds.size());
}

double medianIterationSeconds(const TimingSamples& samples) {
  std::vector<double> sorted = samples.iterationSeconds;
  if (sorted.empty()) return 0.0;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t middle = sorted.size() / 2;
  return sorted.size() % 2 == 1 ? sorted[middle] : 0.5 * (sorted[middle - 1] + sorted[middle]);
}

Status timeLoop(const std::string& what, int warmupIters, int iters, const std::function<Status()>& barrier,
                const std::function<Status()>& operation, TimingSamples& out) {
  for (int i = 0; i < warmupIters; ++i) {
    enterStretch(what);
    CHIMERA_RETURN_IF_ERROR(operation());
  }
  enterStretch(what);
  CHIMERA_RETURN_IF_ERROR(barrier());
  TimingSamples samples;
  samples.iterationSeconds.reserve(static_cast<std::size_t>(iters));
  const Clock::time_point loopStart = Clock::now();
  Clock::time_point lapStart = loopStart;
  for (int i = 0; i < iters; ++i) {
    enterStretch(what, i);
    CHIMERA_RETURN_IF_ERROR(operation());
    const Clock::time_point lapEnd = Clock::now();
    samples.iterationSeconds.push_back(secondsBetween(lapStart, lapEnd));
    lapStart = lapEnd;
  }
  leaveStretch();
  samples.loopSeconds = secondsBetween(loopStart, lapStart);
  out = std::move(samples);
  return Status::ok();
}

}  // namespace chimera::bench
