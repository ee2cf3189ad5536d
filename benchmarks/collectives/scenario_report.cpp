// SPDX-License-Identifier: Apache-2.0
// Implements the output of chimera-bench --scenario/--chain: table and JSON rows.
#include "scenario_report.hpp"

#include <fmt/format.h>

namespace chimera::bench {
namespace {

template <typename T>
detail::Json optionalJson(const std::optional<T>& value) {
  return value ? detail::Json(*value) : detail::Json();
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
  out += fmt::format("# {} of {} iterations after {} warm-up (each the slowest rank's time); predicted = cost model "
                     "'{}' baseline/fused; plan = the planner's decision\n",
                     info.stat, info.iters, info.warmupIters, info.topology);
  out += "# pipelined = the fused plan run in `chunks` chunks (PipelinedChain); gain = fused / pipelined, "
         "predicted = the model's\n";
  out += fmt::format("#{:>7}  {:>10}  {:>10}  {:>8}  {:>16}  {:>11}  {:>11}  {:>7}  {:>9}  {:>8}  {:>11}  {:>6}  "
                     "{:>6}  {:>9}  {:>6}\n",
                     "scenario", "size", "count", "type", "shape", "baseline", "fused", "speedup", "predicted", "plan",
                     "pipelined", "chunks", "gain", "predicted", "#wrong");
  out += fmt::format("#{:>7}  {:>10}  {:>10}  {:>8}  {:>16}  {:>11}  {:>11}  {:>7}  {:>9}  {:>8}  {:>11}  {:>6}  "
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
  return fmt::format("{:>8}  {:>10}  {:>10}  {:>8}  {:>16}  {:>11}  {:>11.1f}  {:>7}  {:>9}  {:>8}  {:>11}  {:>6}  "
                     "{:>6}  {:>9}  {:>6}\n",
                     row.scenario, r.bytes, r.count, dataTypeName(r.dtype), row.shape, baseline, r.timeUs,
                     ratioText(speedup(r)), ratioText(row.predictedSpeedup), row.plannerFuses ? "fused" : "baseline",
                     pipelined, row.pipelineChunks, ratioText(gain), ratioText(row.predictedPipelineGain), wrong);
}

std::string scenarioTableFooter(const std::vector<ScenarioRow>& rows) {
  std::optional<std::uint64_t> wrong;
  for (const ScenarioRow& row : rows) {
    if (row.result.wrong) wrong = wrong.value_or(0) + *row.result.wrong;
  }
  return fmt::format("# Wrong elements (fused vs baseline) : {}\n", wrong ? fmt::format("{}", *wrong) : "N/A");
}

detail::Json scenarioJson(const ScenarioRunInfo& info, const std::vector<ScenarioRow>& rows) {
  detail::Json json = detail::Json::object();
  json.set("mode", "scenario").set("nranks", info.nranks).set("backend", info.backend);
  json.set("topology", info.topology).set("baseline", "the chain as written (ChainMode::Baseline)");
  json.set("stat", info.stat).set("iters", info.iters).set("warmup_iters", info.warmupIters);
  detail::Json rowsJson = detail::Json::array();
  for (const ScenarioRow& row : rows) {
    const ResultRow& r = row.result;
    detail::Json item = detail::Json::object();
    item.set("bytes", static_cast<std::uint64_t>(r.bytes)).set("count", static_cast<std::uint64_t>(r.count));
    item.set("dtype", dataTypeName(r.dtype)).set("op", r.op ? std::string(reduceOpName(*r.op)) : "none");
    item.set("time_us", r.timeUs).set("algbw_gbps", r.algbwGBps).set("busbw_gbps", r.busbwGBps);
    item.set("wrong", optionalJson(r.wrong)).set("baseline_time_us", optionalJson(r.baselineTimeUs));
    item.set("speedup", optionalJson(speedup(r)));
    item.set("scenario", row.scenario).set("predicted_speedup", optionalJson(row.predictedSpeedup));
    item.set("shape", row.shape).set("planner_fuses", row.plannerFuses);
    item.set("pipelined_time_us", optionalJson(row.pipelinedTimeUs)).set("pipeline_chunks", row.pipelineChunks);
    item.set("predicted_pipeline_gain", optionalJson(row.predictedPipelineGain));
    rowsJson.push(std::move(item));
  }
  json.set("rows", std::move(rowsJson));
  return json;
}

}  // namespace chimera::bench
