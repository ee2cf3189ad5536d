// SPDX-License-Identifier: Apache-2.0
// chimera-model: whole-model analysis of one training iteration (no communication).
//
//   chimera-model --model gpt2-medium --parallel "tp=4,sp=4,pp=2,microbatches=8"
//                 --topology pcie-4080x8 [--json] [--collectives]
//
// Lists every collective of the iteration, plans each chain on the topology and prints per
// layer and in total the baseline vs fused bytes and communication time, the roofline
// compute, the predicted iteration times and the end-to-end speedup. Bad input: one line
// on stderr, exit status 2.
#include <fmt/format.h>

#include <string>
#include <string_view>

#include "chimera/planning/topology.hpp"
#include "chimera/planning/training_model.hpp"
#include "common/json.hpp"
#include "core/check.hpp"
#include "tools/tool_main.hpp"

namespace chimera {
namespace {

constexpr std::string_view kUsage =
    "usage: chimera-model --model NAME|FILE --parallel CONFIG --topology NAME|FILE [--json] [--collectives]\n"
    "  --model gpt2-medium       built in: gpt2-medium, gpt-moe; or a chimera-model-1 JSON file\n"
    "  --parallel \"tp=4,sp=4,pp=2,microbatches=8\"  dp, tp, sp (1 or tp), pp, ep, microbatches (default 1)\n"
    "  --topology pcie-4080x8    a preset (pcie-4080x8, nvswitch-h20x8, dgx-h100x8, multinode-ib:N) or a\n"
    "                            profile JSON with device memory bandwidth and peak FLOP/s\n"
    "  --json                    one JSON document (every collective, every layer, the totals)\n"
    "  --collectives             also list every collective kind with its plan (text mode)\n";

std::string ms(double seconds) { return fmt::format("{:.3f}", seconds * 1e3); }
std::string mib(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1048576.0); }

std::string textReport(const ModelReport& r, bool collectives) {
  const ParallelConfig& p = r.parallel;
  std::string text = fmt::format(
      "model {}: {} layers, hidden {}, {} heads, seq {}, micro-batch {}, {}{}\n", r.model.name, r.model.layers,
      r.model.hidden, r.model.heads, r.model.seqLength, r.model.microBatch, dataTypeName(r.model.dtype),
      r.model.experts > 0
          ? fmt::format(", {} experts top-{} every {} layers", r.model.experts, r.model.topK, r.model.moeEvery)
          : "");
  text += fmt::format("parallel dp={} tp={} sp={} pp={} ep={}, {} micro-batches (1F1B), {} GPUs on {}\n\n", p.dp, p.tp,
                      p.sp, p.pp, p.ep, p.microbatches, p.ranks(), r.topology);
  text += "per layer over the iteration (all micro-batches, forward and backward; times per GPU):\n";
  text += fmt::format("  {:>5} {:>5} {:>4} {:>12} {:>14} {:>14} {:>12} {:>12}\n", "layer", "stage", "moe", "compute ms",
                      "baseline ms", "fused ms", "base MiB", "fused MiB");
  for (const ModelLayer& l : r.layers) {
    text += fmt::format("  {:>5} {:>5} {:>4} {:>12} {:>14} {:>14} {:>12} {:>12}\n", l.layer, l.stage,
                        l.moe ? "yes" : "", ms(l.computeSeconds), ms(l.baselineCommSeconds), ms(l.fusedCommSeconds),
                        mib(l.baselineBytes), mib(l.fusedBytes));
  }
  text += "\nnot in a layer (hand-offs and gradient reduction not merged into a layer's chain):\n";
  for (const ModelCollective& c : r.collectives) {
    if (c.layer >= 0) continue;
    text += fmt::format("  {:<40} x{:<3} {} -> {} ms, {} -> {} MiB\n", c.where, c.count, ms(c.baselineSeconds),
                        ms(c.fusedSeconds), mib(c.baselineBytes), mib(c.fusedBytes));
  }
  if (collectives) {
    text += "\nevery collective (per run):\n";
    for (const ModelCollective& c : r.collectives) {
      text += fmt::format("  {} x{}: {} on {} from {} consume {}: {} ms -> {} ms ({})\n", c.where, c.count, c.chain,
                          c.shape, c.from, c.consume, ms(c.baselineSeconds), ms(c.fusedSeconds),
                          c.fused ? "fused" : "baseline");
    }
  }
  text += fmt::format(
      "\ntotal bytes sent by all GPUs: baseline {} MiB, fused {} MiB\n"
      "critical path (1F1B, no overlap): compute {} ms\n"
      "  communication: baseline {} ms, fused {} ms (speedup {:.2f}x)\n"
      "  iteration:     baseline {} ms, fused {} ms (end-to-end speedup {:.2f}x)\n",
      mib(r.baselineBytes), mib(r.fusedBytes), ms(r.computeSeconds), ms(r.baselineCommSeconds), ms(r.fusedCommSeconds),
      r.communicationSpeedup(), ms(r.baselineIterationSeconds), ms(r.fusedIterationSeconds), r.endToEndSpeedup());
  return text;
}

detail::Json jsonReport(const ModelReport& r) {
  using detail::Json;
  Json collectives = Json::array();
  for (const ModelCollective& c : r.collectives) {
    collectives.push_back(Json::object({{"where", c.where},
                                        {"layer", c.layer},
                                        {"mesh", c.mesh},
                                        {"from", c.from},
                                        {"chain", c.chain},
                                        {"consume", c.consume},
                                        {"shape", c.shape},
                                        {"count", c.count},
                                        {"baseline_bytes", c.baselineBytes},
                                        {"fused_bytes", c.fusedBytes},
                                        {"baseline_s", c.baselineSeconds},
                                        {"fused_s", c.fusedSeconds},
                                        {"decision", c.fused ? "fused" : "baseline"}}));
  }
  Json layers = Json::array();
  for (const ModelLayer& l : r.layers) {
    layers.push_back(Json::object({{"layer", l.layer},
                                   {"stage", l.stage},
                                   {"moe", l.moe},
                                   {"compute_s", l.computeSeconds},
                                   {"baseline_comm_s", l.baselineCommSeconds},
                                   {"fused_comm_s", l.fusedCommSeconds},
                                   {"baseline_bytes", l.baselineBytes},
                                   {"fused_bytes", l.fusedBytes}}));
  }
  const ParallelConfig& p = r.parallel;
  return Json::object(
      {{"format", "chimera-model-report-1"},
       {"model", r.model.name},
       {"parallel",
        Json::object(
            {{"dp", p.dp}, {"tp", p.tp}, {"sp", p.sp}, {"pp", p.pp}, {"ep", p.ep}, {"microbatches", p.microbatches}})},
       {"topology", r.topology},
       {"compute_s", r.computeSeconds},
       {"baseline_comm_s", r.baselineCommSeconds},
       {"fused_comm_s", r.fusedCommSeconds},
       {"baseline_iteration_s", r.baselineIterationSeconds},
       {"fused_iteration_s", r.fusedIterationSeconds},
       {"communication_speedup", r.communicationSpeedup()},
       {"end_to_end_speedup", r.endToEndSpeedup()},
       {"baseline_bytes", r.baselineBytes},
       {"fused_bytes", r.fusedBytes},
       {"layers", std::move(layers)},
       {"collectives", std::move(collectives)}});
}

Status run(const detail::ToolOptions& options, std::string& output) {
  ModelConfig model;
  CHIMERA_RETURN_IF_ERROR(loadModelConfig(options.value("model"), model));
  ParallelConfig parallel;
  CHIMERA_RETURN_IF_ERROR(parseParallelConfig(options.value("parallel"), parallel));
  Topology topology;
  CHIMERA_RETURN_IF_ERROR(loadTopology(options.value("topology"), topology));
  ModelReport report;
  CHIMERA_RETURN_IF_ERROR(analyzeModel(model, parallel, topology, report));
  output = options.has("json") ? detail::dumpJson(jsonReport(report), 2) + "\n"
                               : textReport(report, options.has("collectives"));
  return Status::ok();
}

}  // namespace
}  // namespace chimera

int main(int argc, char** argv) {
  static constexpr std::string_view kKeys[] = {"model", "parallel", "topology"};
  static constexpr std::string_view kSwitches[] = {"json", "collectives"};
  return chimera::detail::toolMain(argc, argv,
                                   {"chimera-model", chimera::kUsage, kKeys, kKeys, kSwitches, chimera::run});
}
