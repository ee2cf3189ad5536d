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

}  // namespace

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

Status timeLoop(int warmupIters, int iters, const std::function<Status()>& barrier,
                const std::function<Status()>& operation, TimingSamples& out) {
  for (int i = 0; i < warmupIters; ++i) CHIMERA_RETURN_IF_ERROR(operation());
  CHIMERA_RETURN_IF_ERROR(barrier());
  TimingSamples samples;
  samples.iterationSeconds.reserve(static_cast<std::size_t>(iters));
  const Clock::time_point loopStart = Clock::now();
  Clock::time_point lapStart = loopStart;
  for (int i = 0; i < iters; ++i) {
    CHIMERA_RETURN_IF_ERROR(operation());
    const Clock::time_point lapEnd = Clock::now();
    samples.iterationSeconds.push_back(secondsBetween(lapStart, lapEnd));
    lapStart = lapEnd;
  }
  samples.loopSeconds = secondsBetween(loopStart, lapStart);
  out = std::move(samples);
  return Status::ok();
}

}  // namespace chimera::bench
