// SPDX-License-Identifier: Apache-2.0
// Implements the chains chimera-bench --scenario runs: the six presets or one from flags.
#include "scenario.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "buffer_check.hpp"
#include "core/check.hpp"
#include "element_codec.hpp"
#include "input_pattern.hpp"

namespace chimera::bench {
namespace {

/// Width targets of the inner dimensions (elements) before rounding to their splits.
constexpr std::int64_t kLastDimWidth = 4096;
constexpr std::int64_t kMiddleDimWidth = 64;

std::set<std::string> axisNames(const Mesh& mesh) {
  std::set<std::string> names;
  for (const MeshAxis& axis : mesh.axes()) names.insert(axis.name);
  return names;
}

/// Tensor dimensions the scenario refers to (at least 2).
int dimensionsUsed(const Scenario& scenario) {
  int maxDim = std::max(scenario.from.maxShardDim(), scenario.consume ? scenario.consume->maxShardDim() : -1);
  for (const ChainOp& op : scenario.chain.ops) maxDim = std::max({maxDim, op.dim, op.toDim});
  return std::max(2, maxDim + 1);
}

/// Product of the sizes of the axes splitting `dim` in `layout`.
std::int64_t splitFactor(const Layout& layout, int dim) {
  std::int64_t factor = 1;
  for (int axis : layout.splitAxes(dim)) factor *= layout.mesh().axis(axis).size;
  return factor;
}

/// Per dimension: the start layout's split (`start`) and the lcm of the splits of every
/// layout on the way (`needed`). The layouts come from tracing on a probe shape of the world
/// size per dimension, which any set of mesh axes divides.
Status splitNeeds(const Scenario& scenario, int dims, std::vector<std::int64_t>& start,
                  std::vector<std::int64_t>& needed) {
  const TensorSpec probe{std::vector<std::int64_t>(static_cast<std::size_t>(dims), scenario.mesh.size()),
                         DataType::F32};
  ChainTrace trace;
  CHIMERA_RETURN_IF_ERROR(traceChain(scenario.from, scenario.chain, probe, trace));
  std::vector<Layout> layouts = trace.layouts;
  if (scenario.consume) layouts.push_back(*scenario.consume);
  start.assign(static_cast<std::size_t>(dims), 1);
  needed.assign(static_cast<std::size_t>(dims), 1);
  for (int d = 0; d < dims; ++d) {
    const auto du = static_cast<std::size_t>(d);
    start[du] = splitFactor(scenario.from, d);
    for (const Layout& layout : layouts) needed[du] = std::lcm(needed[du], splitFactor(layout, d));
  }
  return Status::ok();
}

std::int64_t roundUp(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

const std::vector<ScenarioText>& scenarioPresets() {
  static const std::vector<ScenarioText> presets = {
      {"tp_sp", "tp=8", "tp=P", "allreduce:tp", "tp=S0"},
      {"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"},
      {"tp_ep", "ep=2,tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1"},
      {"sp_ep", "dp=2,sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2"},
      {"pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R"},
      {"pp_ep", "pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1"},
  };
  return presets;
}

Status findScenario(std::string_view name, ScenarioText& out) {
  std::string names;
  for (const ScenarioText& preset : scenarioPresets()) {
    if (preset.name == name) {
      out = preset;
      return Status::ok();
    }
    names += names.empty() ? preset.name : ", " + preset.name;
  }
  return Status::invalidArgument(fmt::format("--scenario: unknown scenario '{}' (expected all, {})", name, names));
}

Status resolveScenario(const ScenarioText& text, int worldSize, std::string_view meshOverride, Scenario& out) {
  const auto context = [&](std::string_view field, const Status& status) {
    return Status(status.code(), fmt::format("{} {}: {}", text.name, field, status.message()));
  };
  Scenario scenario;
  scenario.name = text.name;
  if (const Status s = Mesh::parse(meshOverride.empty() ? text.mesh : meshOverride, worldSize, scenario.mesh);
      !s.isOk()) {
    return context("--mesh", s);
  }
  if (!meshOverride.empty() && !text.mesh.empty()) {
    Mesh preset;
    CHIMERA_RETURN_IF_ERROR(Mesh::parse(text.mesh, 8, preset));
    CHIMERA_CHECK_ARG(axisNames(preset) == axisNames(scenario.mesh), "{} --mesh: '{}' must name the preset's axes ({})",
                      text.name, meshOverride, text.mesh);
  }
  if (const Status s = Layout::parse(text.from, scenario.mesh, scenario.from); !s.isOk()) return context("from", s);
  if (const Status s = Chain::parse(text.chain, scenario.mesh, scenario.chain); !s.isOk()) return context("chain", s);
  if (!text.consume.empty()) {
    Layout consume;
    if (const Status s = Layout::parse(text.consume, scenario.mesh, consume); !s.isOk()) {
      return context("consume", s);
    }
    scenario.consume = consume;
  }
  std::vector<std::int64_t> start;
  std::vector<std::int64_t> needed;
  if (const Status s = splitNeeds(scenario, dimensionsUsed(scenario), start, needed); !s.isOk()) {
    return context("chain", s);
  }
  out = std::move(scenario);
  return Status::ok();
}

Status scenarioTensor(const Scenario& scenario, DataType dtype, std::size_t bytesPerRank, TensorSpec& out) {
  const int dims = dimensionsUsed(scenario);
  std::vector<std::int64_t> start;
  std::vector<std::int64_t> needed;
  CHIMERA_RETURN_IF_ERROR(splitNeeds(scenario, dims, start, needed));
  const auto localElements = static_cast<std::int64_t>(bytesPerRank / dataTypeSize(dtype));
  // Dimension 0's global extent must be a multiple of needed[0]; locally that is a multiple of:
  const std::int64_t step0 = needed[0] / std::gcd(needed[0], start[0]);
  for (std::int64_t width = kLastDimWidth; width >= 1; width /= 2) {
    std::vector<std::int64_t> shape(static_cast<std::size_t>(dims));
    std::int64_t innerLocal = 1;
    for (int d = 1; d < dims; ++d) {
      const auto du = static_cast<std::size_t>(d);
      const std::int64_t target = d == dims - 1 ? width : std::min(width, kMiddleDimWidth);
      shape[du] = roundUp(target, needed[du]);
      innerLocal *= shape[du] / start[du];
    }
    const std::int64_t local0 = localElements / innerLocal / step0 * step0;
    if (local0 < 1) continue;
    shape[0] = local0 * start[0];
    out = TensorSpec{std::move(shape), dtype};
    return Status::ok();
  }
  return Status::invalidArgument(
      fmt::format("{}: {} bytes per rank is too small for a {} tensor split as the chain "
                  "needs",
                  scenario.name, bytesPerRank, dataTypeName(dtype)));
}

void fillScenarioInput(const Layout& from, const TensorSpec& spec, int rank, std::uint64_t seed, void* host) {
  if (!from.holds(rank)) return;
  const Mesh& mesh = from.mesh();
  const AxisSet partial = from.axesOfKind(Placement::Kind::Partial);
  const int member = partial.bits() == 0 ? 0 : mesh.groupIndex(rank, partial);
  std::vector<int> members(static_cast<std::size_t>(mesh.size()));
  std::iota(members.begin(), members.end(), 0);
  const InputPattern pattern(seed, spec.dtype, ReduceOp::Sum, members);
  const Box box = from.rankBox(rank, spec);
  const std::size_t dims = spec.shape.size();
  // Row-major walk of the local box: the innermost dimension is a contiguous run.
  const std::int64_t rowLength = box.extent[dims - 1];
  const std::int64_t rows = rowLength == 0 ? 0 : box.volume() / rowLength;
  std::vector<std::int64_t> coords(box.offset);
  dispatchDataType(spec.dtype, [&](auto tag) {
    using T = typename decltype(tag)::Type;
    T* out = static_cast<T*>(host);
    for (std::int64_t row = 0; row < rows; ++row) {
      std::int64_t base = 0;
      for (std::size_t d = 0; d < dims; ++d) base = base * spec.shape[d] + coords[d];
      for (std::int64_t i = 0; i < rowLength; ++i) {
        *out++ = encodeElement<T>(pattern.value(member, static_cast<std::size_t>(base + i)));
      }
      for (std::size_t d = dims - 1; d-- > 0;) {
        if (++coords[d] < box.offset[d] + box.extent[d]) break;
        coords[d] = box.offset[d];
      }
    }
  });
}

std::uint64_t countDifferences(const void* result, const void* reference, std::size_t count, DataType dtype) {
  return dispatchDataType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::Type;
    const T* expected = static_cast<const T*>(reference);
    return countMismatches(result, dtype, count, [&](std::size_t i) { return decodeElement(expected[i]); });
  });
}

}  // namespace chimera::bench
