// SPDX-License-Identifier: Apache-2.0
// The plan cost a Python caller names: None or "bytes" (bytes alone), a topology preset
// ("pcie-4080x8", "dgx-h100x8", ...) or a calibrated profile JSON path.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>

#include "chimera/planning/planner.hpp"

namespace chimera::python {

/// The cost model `name` selects; raises the Status exception when the topology is unknown.
std::unique_ptr<PlanCost> makeCost(nanobind::handle name);

}  // namespace chimera::python
