// SPDX-License-Identifier: Apache-2.0
// chimera.plan(...): the analysis of the chimera-plan tool (bytes per op, redundancy, the fused
// plan and the decision), returned as the dict its --json prints. No communication.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/planning/redundancy.hpp"
#include "cost_choice.hpp"
#include "errors.hpp"
#include "tools/plan_report.hpp"

namespace chimera::python {
namespace {

nb::object plan(nb::handle meshObj, const std::vector<std::int64_t>& shape, nb::handle dtype, nb::handle from,
                const std::string& chainText, nb::handle consume, nb::handle topology) {
  const Mesh mesh = toMesh(meshObj);
  TensorSpec spec;
  spec.shape = shape;
  spec.dtype = toDataType(dtype);
  const Layout fromLayout = toLayout(from, mesh, "from");
  Chain chain;
  check(Chain::parse(chainText, mesh, chain));
  std::optional<Layout> consumed;
  if (!consume.is_none()) consumed = toLayout(consume, mesh, "consume");
  const std::unique_ptr<PlanCost> cost = makeCost(topology);
  ChainPlan chainPlan;
  check(planChain(spec, fromLayout, chain, consumed, *cost, chainPlan));
  ChainAnalysis analysis;
  check(analyzeChain(chainPlan.trace, chainPlan.consumed, spec, analysis));
  const detail::PlanQuery query{mesh.toString(), chain.toString(mesh), std::string(cost->name())};
  const std::string json = detail::dumpJson(detail::jsonPlanReport(query, chainPlan, analysis));
  return nb::module_::import_("json").attr("loads")(json);
}

nb::dict planRedistributionBytes(nb::handle meshObj, const std::vector<std::int64_t>& shape, nb::handle dtype,
                                 nb::handle from, nb::handle to, nb::handle topology) {
  const std::unique_ptr<PlanCost> cost = makeCost(topology);
  return redistributionReport(toMesh(meshObj), shape, dtype, from, to, *cost);
}

}  // namespace

nb::dict redistributionReport(const Mesh& mesh, const std::vector<std::int64_t>& shape, nb::handle dtype,
                              nb::handle from, nb::handle to, const PlanCost& cost) {
  const TensorSpec spec{shape, toDataType(dtype)};
  const Layout source = toLayout(from, mesh, "from");
  const Layout target = toLayout(to, mesh, "to");
  check(source.validate(spec));
  check(target.validate(spec));
  Plan plan;
  check(planRedistribution(spec, source, target, 1, cost, plan));
  const PlanBytes bytes = planBytes(plan);
  nb::dict out;
  out["bytes"] = bytes.total;
  out["max_rank_bytes"] = bytes.maxPerRank;
  out["plan"] = plan.toString();
  return out;
}

void bindPlan(nb::module_& m) {
  m.def("plan", &plan, nb::arg("mesh"), nb::arg("shape"), nb::arg("dtype"), nb::arg("from_layout"), nb::arg("chain"),
        nb::arg("consume").none() = nb::none(), nb::arg("topology").none() = nb::none(),
        "The analysis of chimera-plan as a dict (the fields of its --json): bytes per op, redundant and "
        "unconsumed bytes, the fused plan, the decision and why. topology: None/\"bytes\", a preset or a profile.");
  m.def("plan_redistribution", &planRedistributionBytes, nb::arg("mesh"), nb::arg("shape"), nb::arg("dtype"),
        nb::arg("from_layout"), nb::arg("to_layout"), nb::arg("topology").none() = nb::none(),
        "The plan Executor.redistribute runs for from_layout -> to_layout when priced by `topology` "
        "(None/\"bytes\": bytes alone), without running it: a dict of the bytes it sends over all ranks, the "
        "busiest rank's (`max_rank_bytes`) and the plan's text. Raises the Status exception (InvalidArgument, "
        "Unsupported) when chimera does not plan the transition.");
}

}  // namespace chimera::python
