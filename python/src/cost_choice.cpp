// SPDX-License-Identifier: Apache-2.0
// Cost model by name; see cost_choice.hpp.
#include "cost_choice.hpp"

#include <nanobind/stl/string.h>

#include <string>

#include "chimera/planning/topology.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "errors.hpp"

namespace chimera::python {

std::unique_ptr<PlanCost> makeCost(nanobind::handle name) {
  const std::string text = name.is_none() ? "bytes" : nanobind::cast<std::string>(name);
  if (text == "bytes") return std::make_unique<BytesCost>();
  Topology topology;
  check(loadTopology(text, topology));
  return std::make_unique<TopologyCost>(std::move(topology));
}

}  // namespace chimera::python
