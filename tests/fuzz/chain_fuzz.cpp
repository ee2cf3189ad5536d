// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: chain text ("allreduce:tp,send:pp") parsed, traced and (up to 8 ops)
// planned on a fixed mesh, with the tensor shape and start layout taken from the input
// ("shape;from;chain"). Any input must give ok or an error Status; a plan, when made, has
// non-negative byte counts (no int64 overflow, which UBSan would also report).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/planner.hpp"
#include "core/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::size_t first = text.find(';');
  if (first == std::string_view::npos) return 0;
  const std::size_t second = text.find(';', first + 1);
  if (second == std::string_view::npos) return 0;
  chimera::Mesh mesh;
  CHIMERA_ASSERT(chimera::Mesh::parse("pp=2,tp=4", 8, mesh).isOk());
  chimera::TensorSpec spec;
  spec.dtype = chimera::DataType::F64;
  if (!chimera::TensorSpec::parseShape(text.substr(0, first), spec.shape).isOk()) return 0;
  chimera::Layout from;
  if (!chimera::Layout::parse(text.substr(first + 1, second - first - 1), mesh, from).isOk()) return 0;
  chimera::Chain chain;
  if (!chimera::Chain::parse(text.substr(second + 1), mesh, chain).isOk()) return 0;
  chimera::ChainTrace trace;
  if (!chimera::traceChain(from, chain, spec, trace).isOk()) return 0;
  CHIMERA_ASSERT(trace.scale >= 1);
  if (chain.ops.size() > 8) return 0;  // longer chains are valid but slow to plan
  chimera::ChainPlan plan;
  if (!chimera::planChain(spec, from, chain, std::nullopt, chimera::BytesCost(), plan).isOk()) return 0;
  const chimera::PlanBytes bytes = chimera::planBytes(plan.fused);
  CHIMERA_ASSERT(bytes.total >= 0 && bytes.maxPerRank >= 0);
  return 0;
}
