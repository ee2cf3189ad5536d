// SPDX-License-Identifier: Apache-2.0
// chimera-plan: analysis of one chain of collectives on one tensor (no communication).
//
//   chimera-plan --mesh pp=2,tp=4 --shape 8192,2048 --dtype bf16 --from "pp=@0,tp=P"
//                --chain "allreduce:tp,send:pp" [--consume "pp=@1,tp=R"] [--topology NAME]
//                [--hosts 0,0,1,1 | --hostfile FILE] [--rank R] [--json]
//
// Prints the chain with bytes per op, the bytes never consumed, the best plan and the
// decision. Bad input: one line on stderr, exit status 2.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/backend.hpp"
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
    "                    [--consume LAYOUT] [--topology NAME|FILE] [--hosts LIST | --hostfile FILE]\n"
    "                    [--rank R] [--json]\n"
    "  --mesh pp=2,tp=4          named mesh axes (row-major)\n"
    "  --shape 8192,2048         logical (full) tensor shape\n"
    "  --dtype bf16              f32 f64 f16 bf16 i32 i64 u8 (or nccl-tests names)\n"
    "  --from \"pp=@0,tp=P\"       start layout: AXES=R|S<dim>|P|P(op)|@<stage>; unlisted axes R\n"
    "  --chain \"allreduce:tp,send:pp\"  allreduce:AX reducescatter:AX:DIM allgather:AX:DIM\n"
    "                            alltoall:AX:FROM:TO slice:AX:DIM send:AX broadcast:AX:ROOT (AX = a or a+b)\n"
    "  --consume \"pp=@1,tp=R\"    what the consumer reads (default: the chain's final layout)\n"
    "  --topology NAME|FILE      cost model: 'bytes' (default: bytes alone), a preset (host, pcie-4080x8,\n"
    "                            nvswitch-h20x8, dgx-h100x8, multinode-ib[:N], hosts:H0,H1,...) or a\n"
    "                            calibrated profile JSON\n"
    "  --hosts 0,1,0,1,...       the host of every rank (names or numbers): price the job as placed, on\n"
    "                            the launch's topology (hosts:...; with --topology, that topology's links)\n"
    "                            and report the bytes crossing hosts\n"
    "  --hostfile FILE           as --hosts, one host name per rank and line (as mpirun places them)\n"
    "  --rank R                  plan as rank R does at run time: the same decision, with only R's transfers\n"
    "  --json                    print one JSON document instead of the report\n";

// Host names (or numbers) in rank order, numbered 0, 1, ... in the order of first appearance.
std::vector<int> numberHosts(const std::vector<std::string>& names) {
  std::vector<std::string> seen;
  std::vector<int> hosts;
  for (const std::string& name : names) {
    auto at = std::find(seen.begin(), seen.end(), name);
    if (at == seen.end()) at = seen.insert(seen.end(), name);
    hosts.push_back(static_cast<int>(at - seen.begin()));
  }
  return hosts;
}

// The placement --hosts or --hostfile gives, if any: the host of every rank of `mesh`.
Status readPlacement(const detail::ToolOptions& options, const Mesh& mesh, std::optional<std::vector<int>>& out) {
  const auto& v = options.values;
  CHIMERA_CHECK_ARG(v.count("hosts") == 0 || v.count("hostfile") == 0, "give --hosts or --hostfile, not both");
  std::vector<std::string> names;
  if (v.count("hosts") != 0) {
    std::string_view rest = v.at("hosts");
    while (true) {
      const std::size_t comma = rest.find(',');
      names.emplace_back(rest.substr(0, comma));
      CHIMERA_CHECK_ARG(!names.back().empty(), "--hosts '{}': an empty host name", v.at("hosts"));
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  } else if (v.count("hostfile") != 0) {
    std::ifstream file(v.at("hostfile"));
    CHIMERA_CHECK_ARG(static_cast<bool>(file), "--hostfile: cannot open '{}'", v.at("hostfile"));
    std::string line;
    while (std::getline(file, line)) {
      const std::size_t begin = line.find_first_not_of(" \t\r");
      if (begin == std::string::npos || line[begin] == '#') continue;  // blank lines and comments
      names.push_back(line.substr(begin, line.find_last_not_of(" \t\r") + 1 - begin));
    }
  } else {
    return Status::ok();
  }
  CHIMERA_CHECK_ARG(static_cast<int>(names.size()) == mesh.size(),
                    "the placement names the hosts of {} ranks, mesh {} has {}", names.size(), mesh.toString(),
                    mesh.size());
  out = numberHosts(names);
  return Status::ok();
}

// The cost model: --topology (default bytes), placed on --hosts when given; without
// --topology a placement prices on the launch topology of those hosts (hosts:...).
Status chooseCost(const detail::ToolOptions& options, const std::optional<std::vector<int>>& placement,
                  std::unique_ptr<PlanCost>& out) {
  const auto& v = options.values;
  if (!placement) return loadPlanCost(v.count("topology") != 0 ? v.at("topology") : "bytes", out);
  Topology topology;
  if (v.count("topology") == 0) {
    CHIMERA_RETURN_IF_ERROR(loadTopology(hostsTopologyName(*placement), topology));
  } else {
    CHIMERA_CHECK_ARG(v.at("topology") != "bytes", "--hosts needs a topology, not 'bytes' (leave --topology out)");
    CHIMERA_RETURN_IF_ERROR(loadTopology(v.at("topology"), topology));
    CHIMERA_CHECK_ARG(topology.fabric != Fabric::SharedMemory && topology.fabric != Fabric::NvSwitch,
                      "--hosts: topology '{}' ({}) has one domain; give one with hosts or nodes (host-network, "
                      "pcie-domains, nvswitch-multinode) or leave --topology out",
                      topology.name, fabricName(topology.fabric));
    CHIMERA_RETURN_IF_ERROR(placeRanks(*placement, topology));
  }
  out = std::make_unique<TopologyCost>(std::move(topology));
  return Status::ok();
}

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
  std::optional<std::vector<int>> placement;
  CHIMERA_RETURN_IF_ERROR(readPlacement(options, mesh, placement));
  std::unique_ptr<PlanCost> owned;
  CHIMERA_RETURN_IF_ERROR(chooseCost(options, placement, owned));
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
  detail::PlanQuery query{mesh.toString(), chain.toString(mesh), std::string(cost.name()), std::nullopt};
  if (placement) {  // a placed job: what crosses the hosts, as the chain and as the plan
    const auto& model = static_cast<const TopologyCost&>(cost).model();
    detail::LinkBytes link;
    CHIMERA_RETURN_IF_ERROR(planLinkBytes(model, plan.baseline, link.baseline));
    CHIMERA_RETURN_IF_ERROR(planLinkBytes(model, plan.fused, link.fused));
    query.linkBytes = link;
  }
  output = options.has("json") ? detail::dumpJson(detail::jsonPlanReport(query, plan, analysis), 2) + "\n"
                               : detail::humanPlanReport(query, plan, analysis);
  return Status::ok();
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  static constexpr std::string_view kKeys[] = {"mesh",    "shape",    "dtype", "from",  "chain",
                                               "consume", "topology", "rank",  "hosts", "hostfile"};
  static constexpr std::string_view kSwitches[] = {"json"};
  return chimera::detail::toolMain(
      argc, argv, {"chimera-plan", chimera::kUsage, kKeys, std::span(kKeys).first(5), kSwitches, chimera::run});
}
