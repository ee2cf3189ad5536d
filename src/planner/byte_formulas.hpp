// SPDX-License-Identifier: Apache-2.0
// Bytes one rank sends in a bandwidth-optimal (ring / pipelined) collective, with L the
// rank's local buffer bytes before the op and n the group size. Fractions round down.
#pragma once

#include <cstdint>
#include <vector>

#include "chimera/planning/plan.hpp"

namespace chimera::detail {

/// AllReduce: 2(n-1)/n * L.
inline std::int64_t allReduceBytes(std::int64_t L, std::int64_t n) { return 2 * (n - 1) * L / n; }
/// ReduceScatter: (n-1)/n * L.
inline std::int64_t reduceScatterBytes(std::int64_t L, std::int64_t n) { return (n - 1) * L / n; }
/// AllGather: (n-1) * L (L is the rank's shard).
inline std::int64_t allGatherBytes(std::int64_t L, std::int64_t n) { return (n - 1) * L; }
/// AllToAll: (n-1)/n * L.
inline std::int64_t allToAllBytes(std::int64_t L, std::int64_t n) { return (n - 1) * L / n; }

/// Adds the bytes each rank sends in `step` of `plan` to `perRank` (one entry per world
/// rank): what stepBytesPerRank returns, without a vector per step.
void addStepBytes(const Plan& plan, const PlanStep& step, std::vector<std::int64_t>& perRank);

}  // namespace chimera::detail
