// SPDX-License-Identifier: Apache-2.0
// The chains chimera-bench --scenario runs: the six presets (the paper's hybrid-parallel
// pairs, docs/planner.md "The six paper scenarios") or one given by --chain/--from/--consume/--mesh, and the logical
// tensor shape each size gets. Pure (no MPI): every rank derives the same values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera::bench {

/// A chain in text form, as the preset table of docs/planner.md writes it.
struct ScenarioText {
  /// "tp_sp", or "chain" for one given on the command line.
  std::string name;
  /// Mesh text at 8 ranks ("pp=2,tp=4").
  std::string mesh;
  /// Start layout ("pp=@0,tp=P").
  std::string from;
  /// The ops as a framework issues them ("allreduce:tp,send:pp").
  std::string chain;
  /// What the consumer reads; empty: the chain's final layout.
  std::string consume;
};

/// The six presets, in the order tp_sp, tp_pp, tp_ep, sp_ep, pp_sp, pp_ep.
const std::vector<ScenarioText>& scenarioPresets();
/// The preset called `name`, or InvalidArgument listing the preset names.
[[nodiscard]] Status findScenario(std::string_view name, ScenarioText& out);

/// A scenario resolved on a world: mesh, layouts and chain parsed and cross-checked.
struct Scenario {
  /// Preset name or "chain".
  std::string name;
  /// The mesh the chain runs on.
  Mesh mesh;
  /// Start layout.
  Layout from;
  /// The ops.
  Chain chain;
  /// Consumed layout; empty: the chain's final layout.
  std::optional<Layout> consume;
};

/// Parses `text` on `worldSize` ranks. `meshOverride` (non-empty) replaces the preset's mesh
/// and must have the same axis names (in any order and sizes). InvalidArgument naming the
/// scenario and the offending field otherwise, including a chain whose preconditions fail.
[[nodiscard]] Status resolveScenario(const ScenarioText& text, int worldSize, std::string_view meshOverride,
                                     Scenario& out);

/// The logical tensor of one row: the shape is chosen so that a rank holding the tensor at
/// the chain's start holds at most `bytesPerRank` bytes (as close as the layouts allow) and
/// every layout on the way (start, after each op, consumed) splits it evenly.
/// Dimensions: as many as the scenario names (at least 2). Inner dimensions get a fixed
/// width, the last one 4096 elements and middle ones 64 (each rounded up to what its
/// splits need), halved until the size fits; dimension 0 takes the rest, rounded down.
/// InvalidArgument when `bytesPerRank` is too small for any such shape.
[[nodiscard]] Status scenarioTensor(const Scenario& scenario, DataType dtype, std::size_t bytesPerRank,
                                    TensorSpec& out);

/// Writes `rank`'s local part of the chain's input into `host` (layout `from`'s local bytes
/// on a holding rank; nothing otherwise). Values depend only on the element's logical index
/// and the rank's index in its partial group (InputPattern "sum" values over the world), so
/// replicas hold equal data, partial copies differ, and every sum the chain makes is exact.
void fillScenarioInput(const Layout& from, const TensorSpec& spec, int rank, std::uint64_t seed, void* host);

/// Number of the `count` elements of `dtype` where `result` differs from `reference` (values
/// compared as numbers, so a NaN always differs, also from a NaN in the reference).
std::uint64_t countDifferences(const void* result, const void* reference, std::size_t count, DataType dtype);

}  // namespace chimera::bench
