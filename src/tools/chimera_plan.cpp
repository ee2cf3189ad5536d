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
#include <cstdio>
#include <map>
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

struct Options {
  std::map<std::string, std::string> values;
  bool json = false;
  bool help = false;
};

Status parseArgs(int argc, char** argv, Options& out) {
  static const char* kKeys[] = {"mesh", "shape", "dtype", "from", "chain", "consume", "topology", "rank"};
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--json") {
      out.json = true;
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      out.help = true;
      continue;
    }
    CHIMERA_CHECK_ARG(arg.substr(0, 2) == "--", "unexpected argument '{}' (see --help)", arg);
    std::string key(arg.substr(2));
    std::string value;
    if (const auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      CHIMERA_CHECK_ARG(i + 1 < argc, "option --{} needs a value", key);
      value = argv[++i];
    }
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    CHIMERA_CHECK_ARG(known, "unknown option --{} (see --help)", key);
    CHIMERA_CHECK_ARG(out.values.count(key) == 0, "option --{} given twice", key);
    out.values[key] = value;
  }
  return Status::ok();
}

Status run(const Options& options, std::string& output) {
  for (const char* key : {"mesh", "shape", "dtype", "from", "chain"}) {
    CHIMERA_CHECK_ARG(options.values.count(key) != 0, "missing --{} (see --help)", key);
  }
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
  if (topology == "bytes") {
    owned = std::make_unique<BytesCost>();
  } else {
    Topology model;
    CHIMERA_RETURN_IF_ERROR(loadTopology(topology, model));
    owned = std::make_unique<TopologyCost>(std::move(model));
  }
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
  output = options.json ? detail::jsonPlanReport(query, plan, analysis).dump(2) + "\n"
                        : detail::humanPlanReport(query, plan, analysis);
  return Status::ok();
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  chimera::Options options;
  chimera::Status status = chimera::parseArgs(argc, argv, options);
  if (status.isOk() && options.help) {
    std::fputs(chimera::kUsage.data(), stdout);
    return 0;
  }
  std::string output;
  if (status.isOk()) status = chimera::run(options, output);
  if (!status.isOk()) {
    std::fprintf(stderr, "chimera-plan: %s\n", status.message().c_str());
    return 2;
  }
  std::fputs(output.c_str(), stdout);
  return 0;
}
