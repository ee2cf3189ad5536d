// SPDX-License-Identifier: Apache-2.0
// Implements the output of chimera-bench --scenario/--chain: table and JSON rows.
#include "scenario_report.hpp"

#include <fmt/format.h>

namespace chimera::bench {
namespace {

template <typename T>
detail::Json optionalJson(const std::optional<T>& value) {
  return value ? detail::Json(*value) : detail::Json(nullptr);
}

std::string ratioText(const std::optional<double>& ratio) { return ratio ? fmt::format("{:.2f}", *ratio) : "n/a"; }

}  // namespace

std::string scenarioBanner(const std::string& name, const std::string& mesh, const std::string& from,
                           const std::string& chain, const std::string& consume) {
  return fmt::format("# {}: mesh {}, from {}, chain {}, consume {}\n", name, mesh, from, chain,
                     consume.empty() ? "(final layout)" : consume);
}

std::string scenarioTableHeader(const ScenarioRunInfo& info) {
  std::string out = fmt::format(
      "# chimera-bench: chains on {} ranks, backend {}; baseline = the chain as written, fused = the planner's "
      "fused plan, interleaved in one run\n",
      info.nranks, info.backend);
  out += fmt::format(
      "# {} of {} iterations after {} warm-up (each the slowest rank's time); predicted = cost model "
      "'{}' baseline/fused; plan = the planner's decision\n",
      info.stat, info.iters, info.warmupIters, info.topology);
  out +=
      "# pipelined = the fused plan run in `chunks` chunks (PipelinedChain); gain = fused / pipelined, "
      "predicted = the model's\n";
  out += fmt::format(
      "#{:>7}  {:>10}  {:>10}  {:>8}  {:>16}  {:>11}  {:>11}  {:>7}  {:>9}  {:>8}  {:>11}  {:>6}  "
      "{:>6}  {:>9}  {:>6}\n",
      "scenario", "size", "count", "type", "shape", "baseline", "fused", "speedup", "predicted", "plan", "pipelined",
      "chunks", "gain", "predicted", "#wrong");
  out += fmt::format(
      "#{:>7}  {:>10}  {:>10}  {:>8}  {:>16}  {:>11}  {:>11}  {:>7}  {:>9}  {:>8}  {:>11}  {:>6}  "
      "{:>6}  {:>9}  {:>6}\n",
      "", "(B)", "(elements)", "", "", "(us)", "(us)", "", "", "", "(us)", "", "", "", "");
  return out;
}

std::string scenarioTableRow(const ScenarioRow& row) {
  const ResultRow& r = row.result;
  const std::string wrong = r.wrong ? fmt::format("{}", *r.wrong) : "N/A";
  const std::string baseline = r.baselineTimeUs ? fmt::format("{:.1f}", *r.baselineTimeUs) : "n/a";
  const std::string pipelined = row.pipelinedTimeUs ? fmt::format("{:.1f}", *row.pipelinedTimeUs) : "n/a";
  std::optional<double> gain;
  if (row.pipelinedTimeUs && *row.pipelinedTimeUs > 0) gain = r.timeUs / *row.pipelinedTimeUs;
  return fmt::format(
      "{:>8}  {:>10}  {:>10}  {:>8}  {:>16}  {:>11}  {:>11.1f}  {:>7}  {:>9}  {:>8}  {:>11}  {:>6}  "
      "{:>6}  {:>9}  {:>6}\n",
      row.scenario, r.bytes, r.count, dataTypeName(r.dtype), row.shape, baseline, r.timeUs, ratioText(speedup(r)),
      ratioText(row.predictedSpeedup), row.plannerFuses ? "fused" : "baseline", pipelined, row.pipelineChunks,
      ratioText(gain), ratioText(row.predictedPipelineGain), wrong);
}

std::string scenarioTableFooter(const std::vector<ScenarioRow>& rows) {
  std::optional<std::uint64_t> wrong;
  for (const ScenarioRow& row : rows) {
    if (row.result.wrong) wrong = wrong.value_or(0) + *row.result.wrong;
  }
  return fmt::format("# Wrong elements (fused vs baseline) : {}\n", wrong ? fmt::format("{}", *wrong) : "N/A");
}

detail::Json scenarioJson(const ScenarioRunInfo& info, const std::vector<ScenarioRow>& rows) {
  detail::Json rowsJson = detail::Json::array();
  for (const ScenarioRow& row : rows) {
    const ResultRow& r = row.result;
    rowsJson.push_back(detail::Json::object({{"bytes", static_cast<std::uint64_t>(r.bytes)},
                                             {"count", static_cast<std::uint64_t>(r.count)},
                                             {"dtype", dataTypeName(r.dtype)},
                                             {"op", r.op ? std::string(reduceOpName(*r.op)) : "none"},
                                             {"time_us", r.timeUs},
                                             {"algbw_gbps", r.algbwGBps},
                                             {"busbw_gbps", r.busbwGBps},
                                             {"wrong", optionalJson(r.wrong)},
                                             {"baseline_time_us", optionalJson(r.baselineTimeUs)},
                                             {"speedup", optionalJson(speedup(r))},
                                             {"scenario", row.scenario},
                                             {"predicted_speedup", optionalJson(row.predictedSpeedup)},
                                             {"shape", row.shape},
                                             {"planner_fuses", row.plannerFuses},
                                             {"pipelined_time_us", optionalJson(row.pipelinedTimeUs)},
                                             {"pipeline_chunks", row.pipelineChunks},
                                             {"predicted_pipeline_gain", optionalJson(row.predictedPipelineGain)}}));
  }
  return detail::Json::object({{"mode", "scenario"},
                               {"nranks", info.nranks},
                               {"backend", info.backend},
                               {"topology", info.topology},
                               {"baseline", "the chain as written (ChainMode::Baseline)"},
                               {"stat", info.stat},
                               {"iters", info.iters},
                               {"warmup_iters", info.warmupIters},
                               {"rows", std::move(rowsJson)}});
}

}  // namespace chimera::bench
