// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: chain text ("allreduce:tp,send:pp") parsed, traced and (up to 8 ops)
// planned on a fixed mesh and tensor, the start layout taken from the input ("from;chain").
// Any input must give ok or an error Status; a plan, when made, has non-negative byte counts.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planner.hpp"
#include "common/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::size_t semi = text.find(';');
  if (semi == std::string_view::npos) return 0;
  chimera::Mesh mesh;
  CHIMERA_ASSERT(chimera::Mesh::parse("pp=2,tp=4", 8, mesh).isOk());
  chimera::Layout from;
  if (!chimera::Layout::parse(text.substr(0, semi), mesh, from).isOk()) return 0;
  chimera::Chain chain;
  if (!chimera::Chain::parse(text.substr(semi + 1), mesh, chain).isOk()) return 0;
  const chimera::TensorSpec spec{{64, 32}, chimera::DataType::F32};
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
