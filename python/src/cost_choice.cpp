// SPDX-License-Identifier: Apache-2.0
// Cost model by name; see cost_choice.hpp.
#include "cost_choice.hpp"

#include <nanobind/stl/string.h>

#include <string>

#include "chimera/planning/topology_cost.hpp"
#include "errors.hpp"

namespace chimera::python {

std::unique_ptr<PlanCost> makeCost(nanobind::handle name) {
  std::unique_ptr<PlanCost> cost;
  check(loadPlanCost(name.is_none() ? "bytes" : nanobind::cast<std::string>(name), cost));
  return cost;
}

}  // namespace chimera::python
