// SPDX-License-Identifier: Apache-2.0
// chimera-model: whole-model analysis of one training iteration (no communication).
//
//   chimera-model --model gpt2-medium --parallel "tp=4,sp=4,pp=2,microbatches=8"
//                 --topology pcie-4080x8 [--topk K] [--imbalance X] [--dispatcher alltoall|allgather]
//                 [--json] [--collectives]
//
// Lists every collective of the iteration, plans each chain on the topology and prints per
// layer and in total the baseline vs fused bytes and communication time, the roofline
// compute, the predicted iteration times and the end-to-end speedup. Bad input: one line
// on stderr, exit status 2.
#include <fmt/format.h>

#include <charconv>
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
    "usage: chimera-model --model NAME|FILE --parallel CONFIG --topology NAME|FILE [--topk K] [--imbalance X]\n"
    "                     [--dispatcher alltoall|allgather] [--json] [--collectives]\n"
    "  --model gpt2-medium       built in: gpt2-medium, gpt-moe; or a chimera-model-1 JSON file\n"
    "  --parallel \"tp=4,sp=4,pp=2,microbatches=8\"  dp, tp, sp (1 or tp), pp, ep, microbatches (default 1)\n"
    "  --topology pcie-4080x8    a preset (pcie-4080x8, nvswitch-h20x8, dgx-h100x8, multinode-ib:N) or a\n"
    "                            profile JSON with device memory bandwidth and peak FLOP/s\n"
    "  --topk K                  MoE layers route each token to K experts (overrides the model's top_k)\n"
    "  --imbalance X             max / mean rows an expert rank receives, 1 (balanced) to ep x tp\n"
    "  --dispatcher alltoall     the baseline MoE dispatcher: alltoall (a row per token and expert)\n"
    "                            or allgather (AllGather tokens, ReduceScatter back)\n"
    "  --json                    one JSON document (every collective, every layer, the totals)\n"
    "  --collectives             also list every collective kind with its plan (text mode)\n";

std::string ms(double seconds) { return fmt::format("{:.3f}", seconds * 1e3); }
std::string mib(std::int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1048576.0); }

std::string moeText(const ModelReport& r) {
  const MoeRouting& moe = r.moe;
  if (moe.experts == 0) return "";
  const auto per = [&](std::int64_t bytes) {
    return fmt::format("{} MiB ({:.2f} rows per token)", mib(bytes),
                       static_cast<double>(bytes) /
                           (static_cast<double>(moe.tokensPerRank) * r.model.hidden * dataTypeSize(r.model.dtype)));
  };
  return fmt::format(
      "moe routing: {} experts top-{} over {} ranks (ep x tp), {} tokens per rank, D = {:.2f} distinct destination "
      "ranks per token, imbalance {:.2f} (baseline dispatcher: {})\n"
      "  bytes one rank sends per dispatch: a row per (token, expert) {}, allgather {}, routed (once per rank) {}\n\n",
      moe.experts, moe.topK, moe.ranks, moe.tokensPerRank, moe.distinctRanks, moe.imbalance,
      moeDispatcherName(r.model.dispatcher), per(moe.perExpertBytes), per(moe.allGatherBytes), per(moe.routedBytes));
}

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
  text += moeText(r);
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
  const MoeRouting& moe = r.moe;
  const Json routing = moe.experts == 0 ? Json(nullptr)
                                        : Json::object({{"experts", moe.experts},
                                                        {"top_k", moe.topK},
                                                        {"ranks", moe.ranks},
                                                        {"distinct_ranks", moe.distinctRanks},
                                                        {"imbalance", moe.imbalance},
                                                        {"dispatcher", moeDispatcherName(r.model.dispatcher)},
                                                        {"tokens_per_rank", moe.tokensPerRank},
                                                        {"per_expert_bytes", moe.perExpertBytes},
                                                        {"allgather_bytes", moe.allGatherBytes},
                                                        {"routed_bytes", moe.routedBytes}});
  return Json::object(
      {{"format", "chimera-model-report-1"},
       {"model", r.model.name},
       {"parallel",
        Json::object(
            {{"dp", p.dp}, {"tp", p.tp}, {"sp", p.sp}, {"pp", p.pp}, {"ep", p.ep}, {"microbatches", p.microbatches}})},
       {"topology", r.topology},
       {"moe", routing},
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

// --topk, --imbalance and --dispatcher override the model's MoE fields.
Status moeOverrides(const detail::ToolOptions& options, ModelConfig& model) {
  if (options.has("topk")) {
    const std::string& text = options.value("topk");
    int k = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), k);
    CHIMERA_CHECK_ARG(ec == std::errc() && ptr == text.data() + text.size() && k >= 1,
                      "--topk '{}': expected a positive integer", text);
    model.topK = k;
  }
  if (options.has("imbalance")) {
    const std::string& text = options.value("imbalance");
    double x = 0;
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    CHIMERA_CHECK_ARG(ec == std::errc() && ptr == text.data() + text.size(),
                      "--imbalance '{}': expected a number (max / mean load)", text);
    model.imbalance = x;
  }
  if (options.has("dispatcher"))
    CHIMERA_RETURN_IF_ERROR(parseMoeDispatcher(options.value("dispatcher"), model.dispatcher));
  CHIMERA_CHECK_ARG(
      model.experts > 0 || !(options.has("topk") || options.has("imbalance") || options.has("dispatcher")),
      "--topk, --imbalance and --dispatcher need a model with experts ('{}' is dense)", model.name);
  return Status::ok();
}

Status run(const detail::ToolOptions& options, std::string& output) {
  ModelConfig model;
  CHIMERA_RETURN_IF_ERROR(loadModelConfig(options.value("model"), model));
  CHIMERA_RETURN_IF_ERROR(moeOverrides(options, model));
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
  static constexpr std::string_view kKeys[] = {"model", "parallel", "topology", "topk", "imbalance", "dispatcher"};
  static constexpr std::string_view kRequired[] = {"model", "parallel", "topology"};
  static constexpr std::string_view kSwitches[] = {"json", "collectives"};
  return chimera::detail::toolMain(argc, argv,
                                   {"chimera-model", chimera::kUsage, kKeys, kRequired, kSwitches, chimera::run});
}
