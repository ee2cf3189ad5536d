// SPDX-License-Identifier: Apache-2.0
// Implements chimera-bench's chain mode: baseline vs fused vs pipelined, checked and timed.
#include "scenario_sweep.hpp"

#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_context.hpp"
#include "bench_device.hpp"
#include "buffer_check.hpp"
#include "chimera/backend.hpp"
#include "chimera/executor.hpp"
#include "chimera/planning/pipeline_cost.hpp"
#include "chimera/planning/pipelined_chain.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "core/check.hpp"
#include "json_report_file.hpp"
#include "scenario.hpp"
#include "timing.hpp"

namespace chimera::bench {
namespace {

/// Rank 0 prints `text` and flushes, so rows appear as they are measured.
void print(int rank, const std::string& text) {
  if (rank != 0) return;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

/// The scenarios the options name, in the presets' order.
std::vector<ScenarioText> requestedScenarios(const Options& options) {
  if (!options.chain.empty()) return {{"chain", "", options.from, options.chain, options.consume}};
  if (options.scenario != "all") {
    ScenarioText preset;
    (void)findScenario(options.scenario, preset);  // validated by parseOptions
    return {preset};
  }
  return scenarioPresets();
}

/// The host of every world rank, from a backend of `kind` over the world (Backend::hostOfRank).
Status launchHosts(const std::string& kind, int worldSize, std::vector<int>& out) {
  Mesh mesh;
  CHIMERA_RETURN_IF_ERROR(Mesh::parse(fmt::format("world={}", worldSize), worldSize, mesh));
  std::unique_ptr<Backend> backend;
  CHIMERA_RETURN_IF_ERROR(createBenchBackend(kind, mesh, backend));
  out = backend->hostOfRank();
  return Status::ok();
}

/// The topology of the cost model: --topology, else the launch's own: the host preset for the
/// world size on one host, the host-network topology of where the ranks run across hosts.
Status loadRunTopology(const Options& options, const std::vector<int>& hosts, Topology& out) {
  const std::string name = options.topology.empty() ? hostsTopologyName(hosts) : options.topology;
  const Status status = loadTopology(name, out);
  if (!status.isOk()) return Status(status.code(), "--topology: " + status.message());
  return Status::ok();
}

/// One row's buffers: the input and the three consumed outputs, in the backend's memory space.
struct ChainBuffers {
  explicit ChainBuffers(Backend& backend) : input(backend), baseline(backend), fused(backend), pipelined(backend) {}
  BackendBuffer input;      ///< the start layout's local tensor
  BackendBuffer baseline;   ///< the consumed layout's local tensor, written by the baseline
  BackendBuffer fused;      ///< the same, written by the fused plan
  BackendBuffer pipelined;  ///< the same, written by the pipelined fused plan
};

/// Everything needed to run one row's two programs.
struct RowRun {
  Executor& executor;
  Backend& backend;
  const ChainRequest& request;
  ChainBuffers& buffers;
  PipelinedChain& pipeline;

  /// Runs the chain in `mode` from the input into `output`.
  Status run(ChainMode mode, BackendBuffer& output) const {
    return executor.runChain(request, mode, buffers.input.data(), buffers.input.size(), output.data(), output.size());
  }
  /// Runs the pipelined fused plan into the pipelined buffer.
  Status runPipelined() const {
    return pipeline.run(buffers.input.data(), buffers.input.size(), buffers.pipelined.data(), buffers.pipelined.size());
  }
};

/// Runs both programs once on poisoned outputs; `wrong` = fused elements differing from the baseline's here.
Status checkRow(const RowRun& row, DataType dtype, std::uint64_t& wrong) {
  std::vector<unsigned char> baseline(row.buffers.baseline.size());
  std::vector<unsigned char> fused(row.buffers.fused.size());
  poisonBuffer(baseline.data(), baseline.size());
  CHIMERA_RETURN_IF_ERROR(copyToBackend(row.backend, row.buffers.baseline.data(), baseline.data(), baseline.size()));
  CHIMERA_RETURN_IF_ERROR(copyToBackend(row.backend, row.buffers.fused.data(), baseline.data(), baseline.size()));
  CHIMERA_RETURN_IF_ERROR(copyToBackend(row.backend, row.buffers.pipelined.data(), baseline.data(), baseline.size()));
  CHIMERA_RETURN_IF_ERROR(row.run(ChainMode::Baseline, row.buffers.baseline));
  CHIMERA_RETURN_IF_ERROR(row.run(ChainMode::Fused, row.buffers.fused));
  CHIMERA_RETURN_IF_ERROR(row.runPipelined());
  CHIMERA_RETURN_IF_ERROR(copyFromBackend(row.backend, baseline.data(), row.buffers.baseline.data(), baseline.size()));
  CHIMERA_RETURN_IF_ERROR(copyFromBackend(row.backend, fused.data(), row.buffers.fused.data(), fused.size()));
  const std::size_t count = fused.size() / dataTypeSize(dtype);
  wrong = countDifferences(fused.data(), baseline.data(), count, dtype);
  CHIMERA_RETURN_IF_ERROR(copyFromBackend(row.backend, fused.data(), row.buffers.pipelined.data(), fused.size()));
  wrong += countDifferences(fused.data(), baseline.data(), count, dtype);
  return Status::ok();
}

/// Statistic over iterations of the slowest rank's time per iteration (collective).
double slowestRankStatistic(TimeStatistic stat, std::vector<double> seconds) {
  const Stretch stretch("chimera-bench: agreeing on a row's times (MPI_Allreduce)");
  MPI_Allreduce(MPI_IN_PLACE, seconds.data(), static_cast<int>(seconds.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  TimingSamples samples;
  for (double s : seconds) samples.loopSeconds += s;
  samples.iterationSeconds = std::move(seconds);
  return stat == TimeStatistic::Median ? medianIterationSeconds(samples) : meanIterationSeconds(samples);
}

/// Which of the three programs a row times (--only).
struct TimedPrograms {
  bool baseline = true;
  bool fused = true;
  bool pipelined = true;
};

TimedPrograms timedPrograms(const Options& options) {
  return {options.only != "fused", options.only != "baseline", options.only.empty()};
}

/// Warm-up, then `iters` rounds of (barrier, baseline, barrier, fused, barrier, pipelined),
/// each call timed alone; a program --only leaves out is neither run nor timed (0 s).
Status timeRow(const Options& options, TimeStatistic stat, const RowRun& row, double& baselineSeconds,
               double& fusedSeconds, double& pipelinedSeconds) {
  const auto barrier = [] { return mpiStatus(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); };
  const TimedPrograms timed = timedPrograms(options);
  const std::string what = "chimera-bench " + row.request.chain.toString(row.backend.mesh()) + " from " +
                           row.request.from.toString() + ": baseline, fused and pipelined";
  for (int i = 0; i < options.warmupIters; ++i) {
    enterStretch(what);
    if (timed.baseline) CHIMERA_RETURN_IF_ERROR(agreeOnStatus(row.run(ChainMode::Baseline, row.buffers.baseline)));
    if (timed.fused) CHIMERA_RETURN_IF_ERROR(agreeOnStatus(row.run(ChainMode::Fused, row.buffers.fused)));
    if (timed.pipelined) CHIMERA_RETURN_IF_ERROR(agreeOnStatus(row.runPipelined()));
  }
  std::vector<double> baseline(static_cast<std::size_t>(options.iters));
  std::vector<double> fused(baseline.size());
  std::vector<double> pipelined(baseline.size());
  Status failed = Status::ok();
  for (std::size_t i = 0; i < baseline.size() && failed.isOk(); ++i) {
    enterStretch(what, static_cast<int>(i));
    failed = barrier();
    if (failed.isOk() && timed.baseline) {
      failed = timeOnBackend(
          row.backend, [&] { return row.run(ChainMode::Baseline, row.buffers.baseline); }, baseline[i]);
    }
    if (failed.isOk()) failed = barrier();
    if (failed.isOk() && timed.fused) {
      failed = timeOnBackend(
          row.backend, [&] { return row.run(ChainMode::Fused, row.buffers.fused); }, fused[i]);
    }
    if (failed.isOk()) failed = barrier();
    if (failed.isOk() && timed.pipelined)
      failed = timeOnBackend(
          row.backend, [&] { return row.runPipelined(); }, pipelined[i]);
  }
  leaveStretch();
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(failed));
  baselineSeconds = slowestRankStatistic(stat, std::move(baseline));
  fusedSeconds = slowestRankStatistic(stat, std::move(fused));
  pipelinedSeconds = slowestRankStatistic(stat, std::move(pipelined));
  return Status::ok();
}

std::string shapeText(const TensorSpec& spec) { return fmt::format("{}", fmt::join(spec.shape, "x")); }

std::optional<double> predictedSpeedup(const ChainPlan& plan) {
  const double baseline = plan.baselineCost.value;
  const double fused = plan.fusedCost.value;
  if (!std::isfinite(baseline) || !std::isfinite(fused) || fused <= 0.0) return std::nullopt;
  return baseline / fused;
}

/// The per-scenario state shared by its rows.
struct ScenarioRun {
  const Options& options;
  const Scenario& scenario;
  Backend& backend;
  Executor& executor;
  TimeStatistic stat;
  const TopologyCost& cost;
};

/// The pipeline of a row: --chunks N (1 when the chain cannot be chunked so), or the model's choice.
Status choosePipelineChunks(const ScenarioRun& run, const ChainPlan& plan, const TensorSpec& spec, int& chunks,
                            std::optional<double>& predictedGain) {
  PipelineChoice choice;
  CHIMERA_RETURN_IF_ERROR(choosePipeline(plan, spec, run.cost, 16, choice));
  chunks = choice.chunks;
  double pipelined = choice.pipelinedSeconds;
  if (run.options.chunks > 0) {
    const bool divides = choice.dim >= 0 && spec.shape[static_cast<std::size_t>(choice.dim)] % run.options.chunks == 0;
    chunks = divides ? run.options.chunks : 1;
    pipelined = choice.unpipelinedSeconds;
    if (chunks > 1) {
      CHIMERA_RETURN_IF_ERROR(predictPipeline(spec, plan.trace.layouts.front(), Chain{plan.trace.ops}, plan.consumed,
                                              choice.dim, chunks, run.cost, pipelined));
    }
  }
  if (std::isfinite(pipelined) && pipelined > 0 && std::isfinite(choice.unpipelinedSeconds)) {
    predictedGain = choice.unpipelinedSeconds / pipelined;
  }
  return Status::ok();
}

/// Plans, fills, checks and times one row; `out` is agreed over ranks.
Status measureRow(const ScenarioRun& run, const TensorSpec& spec, ScenarioRow& out) {
  const int rank = run.backend.rank();
  const ChainRequest request{spec, run.scenario.from, run.scenario.chain, run.scenario.consume};
  const ChainPlan* plan = nullptr;
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(run.executor.plan(request, plan)));
  const Layout& from = run.scenario.from;
  const std::size_t inputBytes = from.holds(rank) ? static_cast<std::size_t>(from.localBytes(spec)) : 0;
  const std::size_t outputBytes =
      plan->consumed.holds(rank) ? static_cast<std::size_t>(plan->consumed.localBytes(spec)) : 0;
  ChainBuffers buffers(run.backend);
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(buffers.input.allocate(inputBytes)));
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(buffers.baseline.allocate(outputBytes)));
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(buffers.fused.allocate(outputBytes)));
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(buffers.pipelined.allocate(outputBytes)));
  int chunks = 1;
  std::optional<double> predictedGain;
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(choosePipelineChunks(run, *plan, spec, chunks, predictedGain)));
  PipelinedChain pipeline(run.executor, run.backend, request, chunks);
  {
    std::vector<unsigned char> host(inputBytes);
    fillScenarioInput(from, spec, rank, run.options.seed, host.data());
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(copyToBackend(run.backend, buffers.input.data(), host.data(), inputBytes)));
  }
  const RowRun row{run.executor, run.backend, request, buffers, pipeline};
  std::uint64_t wrong = 0;
  if (run.options.check) CHIMERA_RETURN_IF_ERROR(agreeOnStatus(checkRow(row, spec.dtype, wrong)));
  double baselineSeconds = 0.0;
  double fusedSeconds = 0.0;
  double pipelinedSeconds = 0.0;
  CHIMERA_RETURN_IF_ERROR(timeRow(run.options, run.stat, row, baselineSeconds, fusedSeconds, pipelinedSeconds));
  {
    const Stretch stretch("chimera-bench: agreeing on a row's wrong elements (MPI_Allreduce)");
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  }

  std::uint64_t startBytes = 0;  // what a holding rank has at the start (same on every rank)
  for (int r = 0; r < run.backend.mesh().size() && startBytes == 0; ++r) {
    if (from.holds(r)) startBytes = static_cast<std::uint64_t>(from.localBytes(spec));
  }
  ScenarioRow result;
  result.scenario = run.scenario.name;
  result.shape = shapeText(spec);
  result.plannerFuses = plan->useFused;
  result.predictedSpeedup = predictedSpeedup(*plan);
  const TimedPrograms timed = timedPrograms(run.options);
  if (timed.pipelined) result.pipelinedTimeUs = pipelinedSeconds * 1e6;
  result.pipelineChunks = chunks;
  result.predictedPipelineGain = predictedGain;
  ResultRow& r = result.result;
  r.bytes = startBytes;
  r.count = startBytes / dataTypeSize(spec.dtype);
  r.dtype = spec.dtype;
  if (!plan->trace.ops.empty() && !from.axesOfKind(Placement::Kind::Partial).empty()) r.op = ReduceOp::Sum;
  r.timeUs = fusedSeconds * 1e6;
  if (timed.baseline) r.baselineTimeUs = baselineSeconds * 1e6;
  computeBandwidth(r, 1.0);
  if (run.options.check) r.wrong = wrong;
  out = std::move(result);
  return Status::ok();
}

/// Every dtype x size row of one scenario, printed as measured.
Status runScenario(const Options& options, const Scenario& scenario, const Topology& topology, const std::string& kind,
                   ScenarioOutcome& outcome) {
  std::unique_ptr<Backend> backend;
  CHIMERA_RETURN_IF_ERROR(createBenchBackend(kind, scenario.mesh, backend));
  // Priced as the executor of a Session would price it: boxes move where this backend moves them.
  Topology priced = topology;
  priced.movesBoxes = backend->movesBoxesEverywhere();
  const TopologyCost cost(std::move(priced));
  Executor executor(*backend, &cost);
  const TimeStatistic stat = options.statGiven ? options.stat : TimeStatistic::Median;
  const ScenarioRun run{options, scenario, *backend, executor, stat, cost};
  for (DataType dtype : options.dataTypes) {
    for (std::size_t bytes : sizeSeries(options)) {
      TensorSpec spec;
      if (const Status status = scenarioTensor(scenario, dtype, bytes, spec); !status.isOk()) {
        print(backend->rank(), fmt::format("# {}, row skipped\n", status.message()));
        continue;
      }
      ScenarioRow row;
      CHIMERA_RETURN_IF_ERROR(measureRow(run, spec, row));
      print(backend->rank(), scenarioTableRow(row));
      outcome.anyWrong |= row.result.wrong.value_or(0) > 0;
      outcome.rows.push_back(std::move(row));
    }
  }
  return Status::ok();
}

}  // namespace

Status runScenarioSweep(const Options& options, ScenarioOutcome& out) {
  int rank = 0;
  int worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  std::vector<Scenario> scenarios;
  for (const ScenarioText& text : requestedScenarios(options)) {
    Scenario scenario;
    CHIMERA_RETURN_IF_ERROR(agreeOnStatus(resolveScenario(text, worldSize, options.mesh, scenario)));
    scenarios.push_back(std::move(scenario));
  }
  const std::string kind = options.backend.empty() ? defaultBackendName() : options.backend;
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(backendAvailable(kind)));
  std::vector<int> hosts;
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(launchHosts(kind, worldSize, hosts)));
  Topology topology;
  CHIMERA_RETURN_IF_ERROR(agreeOnStatus(loadRunTopology(options, hosts, topology)));
  JsonReportFile json;
  CHIMERA_RETURN_IF_ERROR(json.open(options.jsonPath, rank));
  ScenarioRunInfo info{worldSize, kind, topology.name, "median", options.iters, options.warmupIters};
  if (options.statGiven && options.stat == TimeStatistic::Mean) info.stat = "mean";
  print(rank, scenarioTableHeader(info));
  ScenarioOutcome outcome;
  for (const Scenario& scenario : scenarios) {
    print(rank,
          scenarioBanner(scenario.name, scenario.mesh.toString(), scenario.from.toString(),
                         scenario.chain.toString(scenario.mesh), scenario.consume ? scenario.consume->toString() : ""));
    CHIMERA_RETURN_IF_ERROR(runScenario(options, scenario, topology, kind, outcome));
  }
  print(rank, scenarioTableFooter(outcome.rows));
  CHIMERA_RETURN_IF_ERROR(json.write(scenarioJson(info, outcome.rows)));
  out = std::move(outcome);
  return Status::ok();
}

}  // namespace chimera::bench
