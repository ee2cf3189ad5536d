// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: topology profile JSON. Any input must give ok or an error Status; an
// accepted profile must price a small plan without crashing (finite or not).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "core/check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  chimera::Topology topology;
  if (!chimera::topologyFromJson(text, topology).isOk()) return 0;
  CHIMERA_ASSERT(chimera::validateTopology(topology).isOk());
  chimera::Mesh mesh;
  CHIMERA_ASSERT(chimera::Mesh::parse("tp=8", 8, mesh).isOk());
  chimera::Layout from;
  chimera::Chain chain;
  CHIMERA_ASSERT(chimera::Layout::parse("tp=P", mesh, from).isOk());
  CHIMERA_ASSERT(chimera::Chain::parse("allreduce:tp", mesh, chain).isOk());
  chimera::ChainPlan plan;
  (void)chimera::planChain(chimera::TensorSpec{{1024, 16}, chimera::DataType::F32}, from, chain, std::nullopt,
                           chimera::TopologyCost(topology), plan);
  return 0;
}
