// SPDX-License-Identifier: Apache-2.0
// chimera-plan: analysis of one chain of collectives on one tensor (no communication).
//
//   chimera-plan --mesh pp=2,tp=4 --shape 8192,2048 --dtype bf16 --from "pp=@0,tp=P"
//                --chain "allreduce:tp,send:pp" [--consume "pp=@1,tp=R"] [--topology NAME] [--rank R] [--json]
//
// Prints the chain with bytes per op, the bytes never consumed, the best plan and the
// decision. Bad input: one line on stderr, exit status 2.
#include <fmt/format.h>

#include <charconv>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/planning/redundancy.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "core/check.hpp"
#include "tools/plan_report.hpp"
#include "tools/tool_main.hpp"

namespace chimera {
namespace {

constexpr std::string_view kUsage =
    "usage: chimera-plan --mesh AXES --shape DIMS --dtype TYPE --from LAYOUT --chain OPS\n"
    "                    [--consume LAYOUT] [--topology NAME|FILE] [--rank R] [--json]\n"
    "  --mesh pp=2,tp=4          named mesh axes (row-major)\n"
    "  --shape 8192,2048         logical (full) tensor shape\n"
    "  --dtype bf16              f32 f64 f16 bf16 i32 i64 u8 (or nccl-tests names)\n"
    "  --from \"pp=@0,tp=P\"       start layout: AXES=R|S<dim>|P|P(op)|@<stage>; unlisted axes R\n"
    "  --chain \"allreduce:tp,send:pp\"  allreduce:AX reducescatter:AX:DIM allgather:AX:DIM\n"
    "                            alltoall:AX:FROM:TO slice:AX:DIM send:AX broadcast:AX:ROOT (AX = a or a+b)\n"
    "  --consume \"pp=@1,tp=R\"    what the consumer reads (default: the chain's final layout)\n"
    "  --topology NAME|FILE      cost model: 'bytes' (default: bytes alone), a preset (host, pcie-4080x8,\n"
    "                            nvswitch-h20x8, dgx-h100x8, multinode-ib[:N]) or a calibrated profile JSON\n"
    "  --rank R                  plan as rank R does at run time: the same decision, with only R's transfers\n"
    "  --json                    print one JSON document instead of the report\n";

Status run(const detail::ToolOptions& options, std::string& output) {
  const auto& v = options.values;
  Mesh mesh;
  CHIMERA_RETURN_IF_ERROR(Mesh::parse(v.at("mesh"), mesh));
  TensorSpec spec;
  CHIMERA_RETURN_IF_ERROR(TensorSpec::parseShape(v.at("shape"), spec.shape));
  CHIMERA_RETURN_IF_ERROR(parseDataType(v.at("dtype"), spec.dtype));
  Layout from;
  CHIMERA_RETURN_IF_ERROR(Layout::parse(v.at("from"), mesh, from));
  Chain chain;
  CHIMERA_RETURN_IF_ERROR(Chain::parse(v.at("chain"), mesh, chain));
  std::optional<Layout> consume;
  if (v.count("consume") != 0) {
    Layout layout;
    CHIMERA_RETURN_IF_ERROR(Layout::parse(v.at("consume"), mesh, layout));
    consume = layout;
  }
  const std::string topology = v.count("topology") != 0 ? v.at("topology") : "bytes";
  std::unique_ptr<PlanCost> owned;
  CHIMERA_RETURN_IF_ERROR(loadPlanCost(topology, owned));
  const PlanCost& cost = *owned;
  int rank = kWorldPlan;
  if (v.count("rank") != 0) {
    const std::string& text = v.at("rank");
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), rank);
    CHIMERA_CHECK_ARG(error == std::errc() && end == text.data() + text.size() && rank >= 0,
                      "--rank '{}' is not a rank (a number from 0)", text);
  }
  ChainPlan plan;
  CHIMERA_RETURN_IF_ERROR(planChain(spec, from, chain, consume, cost, plan, rank));
  ChainAnalysis analysis;
  CHIMERA_RETURN_IF_ERROR(analyzeChain(plan.trace, plan.consumed, spec, analysis));
  const detail::PlanQuery query{mesh.toString(), chain.toString(mesh), std::string(cost.name())};
  output = options.has("json") ? detail::dumpJson(detail::jsonPlanReport(query, plan, analysis), 2) + "\n"
                               : detail::humanPlanReport(query, plan, analysis);
  return Status::ok();
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  static constexpr std::string_view kKeys[] = {"mesh",  "shape",   "dtype",    "from",
                                               "chain", "consume", "topology", "rank"};
  static constexpr std::string_view kSwitches[] = {"json"};
  return chimera::detail::toolMain(
      argc, argv, {"chimera-plan", chimera::kUsage, kKeys, std::span(kKeys).first(5), kSwitches, chimera::run});
}
