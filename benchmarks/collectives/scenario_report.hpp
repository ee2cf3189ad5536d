// SPDX-License-Identifier: Apache-2.0
// Output of chimera-bench --scenario/--chain: the table (rank 0 prints it) and the --json
// document, which keeps the collective mode's row fields and adds the scenario's own.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/json.hpp"
#include "report.hpp"

namespace chimera::bench {

/// One measured chain row, agreed over ranks. `result` holds the collective mode's fields with
/// the fused program as "ours": timeUs = fused, baselineTimeUs = the chain as written,
/// wrong = fused consumed elements that differ from the baseline's, summed over ranks;
/// algbw = bytes / fused time and busbw = algbw (a chain has no bus-bandwidth factor).
struct ScenarioRow {
  /// The collective mode's fields (see above for their meaning here).
  ResultRow result;
  /// Preset name or "chain".
  std::string scenario;
  /// The logical tensor shape ("4096x4096").
  std::string shape;
  /// The planner's decision with the cost model: true when it would run the fused plan.
  bool plannerFuses = false;
  /// Predicted baseline / fused time from the cost model; empty when it could not price them.
  std::optional<double> predictedSpeedup;
  /// Time of the pipelined fused plan (PipelinedChain, measured interleaved with the other
  /// two); empty when not measured.
  std::optional<double> pipelinedTimeUs;
  /// Its chunk count (1: the fused plan as is, e.g. a chain with no pipeline dim).
  int pipelineChunks = 1;
  /// Predicted unpipelined / pipelined time of the fused plan; empty without a prediction.
  std::optional<double> predictedPipelineGain;
};

/// What the run was (JSON header and the table banner).
struct ScenarioRunInfo {
  /// World size.
  int nranks = 0;
  /// "mpi" or "nccl".
  std::string backend;
  /// The cost model's topology name ("host", or a profile's name).
  std::string topology;
  /// "median" or "mean".
  std::string stat;
  /// -n: timed iterations per program.
  int iters = 0;
  /// -w: warm-up rounds.
  int warmupIters = 0;
};

/// The scenario's description: one '#' line with mesh, from, chain, consume.
std::string scenarioBanner(const std::string& name, const std::string& mesh, const std::string& from,
                           const std::string& chain, const std::string& consume);
/// The run banner and the two column-header lines ('#' lines).
std::string scenarioTableHeader(const ScenarioRunInfo& info);
/// One table line.
std::string scenarioTableRow(const ScenarioRow& row);
/// The closing summary: wrong elements over all rows (N/A when unchecked).
std::string scenarioTableFooter(const std::vector<ScenarioRow>& rows);
/// {"mode": "scenario", "nranks", "backend", "topology", "baseline", "stat", "iters", "warmup_iters",
///  "rows": [{the ten fields of reportJson's rows, "scenario", "predicted_speedup", "shape",
///  "planner_fuses", "pipelined_time_us", "pipeline_chunks", "predicted_pipeline_gain"}]};
///  missing values are null. `wrong` counts the fused and the pipelined outputs' differences.
detail::Json scenarioJson(const ScenarioRunInfo& info, const std::vector<ScenarioRow>& rows);

}  // namespace chimera::bench
