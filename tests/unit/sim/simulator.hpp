// SPDX-License-Identifier: Apache-2.0
// In-process simulator of N ranks (tests only): the oracle of the planner tests. Each rank
// holds a real local buffer; chain ops and plan steps run by each collective's definition
// (groups from the Mesh, blocks split and concatenated along dims), never through the
// planner's own box arithmetic. Bytes are counted per rank with the byte formulas of
// docs/planner.md for collectives and from the actual boxes for many-to-many transfers.
// Internal misuse (a box outside a tensor, a missing buffer) throws std::logic_error,
// which gtest reports.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/plan.hpp"
#include "sim/local_tensor.hpp"

namespace chimera::sim {

/// Per world rank: its local tensor, or nothing when the rank holds no copy.
using RankTensors = std::vector<std::optional<LocalTensor>>;

/// Bytes each rank sent.
struct Traffic {
  std::vector<std::int64_t> perRank;
  std::int64_t total() const;
  std::int64_t maxPerRank() const;
};

/// The simulator's own geometry of a layout: does `rank` hold a copy, and which logical box.
bool simHolds(const Layout& layout, int rank);
Box simBox(const Layout& layout, const TensorSpec& spec, int rank);

/// Initial data placed as `layout`: element values are a function of (seed, logical index)
/// and, on partial axes, of the rank's coordinates there (independent partials).
RankTensors distribute(const Layout& layout, const TensorSpec& spec, std::uint64_t seed);

/// Runs the chain op by op from `input` (placed as trace.layouts[0]).
RankTensors runChain(const ChainTrace& trace, const TensorSpec& spec, const RankTensors& input, Traffic& traffic);

/// What a consumer reading `consumed` sees after the chain left `final` (placed as `finalLayout`).
RankTensors consume(const RankTensors& final, const Layout& finalLayout, const Layout& consumed,
                    const TensorSpec& spec);

/// Runs every step of `plan` from `input` (placed as its buffer 0) and returns buffer 1.
/// Throws when a step leaves an output element unwritten or a buffer of the wrong shape.
RankTensors runPlan(const Plan& plan, const RankTensors& input, Traffic& traffic);

}  // namespace chimera::sim
