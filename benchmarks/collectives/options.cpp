// SPDX-License-Identifier: Apache-2.0
// Implements chimera-bench's command line: nccl-tests flags plus chimera's own.
#include "options.hpp"
#include "common/size_text.hpp"

#include <fmt/format.h>

#include <limits>

#include "common/cli.hpp"
#include "core/check.hpp"
#include "core/type_lists.hpp"
#include "scenario.hpp"

namespace chimera::bench {
namespace {

/// Parses "name", "a,b,c" or "all" into a list, using `parseOne` per name.
template <typename T, std::size_t N>
Status parseList(std::string_view flag, std::string_view text, const T (&all)[N],
                 Status (*parseOne)(std::string_view, T&), std::vector<T>& out) {
  std::vector<T> values;
  if (text == "all") {
    values.assign(std::begin(all), std::end(all));
  } else {
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      T value{};
      const Status status = parseOne(text.substr(start, comma - start), value);
      if (!status.isOk()) return Status::invalidArgument(fmt::format("{}: {}", flag, status.message()));
      values.push_back(value);
      start = comma + 1;
    }
  }
  out = std::move(values);
  return Status::ok();
}

Status parseStat(std::string_view text, TimeStatistic& out) {
  if (text == "mean") return out = TimeStatistic::Mean, Status::ok();
  if (text == "median") return out = TimeStatistic::Median, Status::ok();
  return Status::invalidArgument(fmt::format("--stat: unknown statistic '{}' (expected mean or median)", text));
}

Status setText(std::string_view flag, std::string_view value, std::string& out) {
  CHIMERA_CHECK_ARG(!value.empty(), "{}: empty value", flag);
  out = value;
  return Status::ok();
}

// The flags of chimera-bench, each applying its value to `o`.
std::vector<detail::CliFlag> flagTable(Options& o) {
  using detail::parseIntFlag;
  using detail::parseSizeFlag;
  return {
      {"-b", "--minbytes", true,
       [&o](auto v) { return o.sizesGiven = true, parseSizeFlag("-b/--minbytes", v, o.minBytes); }},
      {"-e", "--maxbytes", true,
       [&o](auto v) { return o.sizesGiven = true, parseSizeFlag("-e/--maxbytes", v, o.maxBytes); }},
      {"-f", "--stepfactor", true,
       [&o](auto v) { return parseIntFlag<std::size_t>("-f/--stepfactor", v, 1, o.stepFactor); }},
      {"-n", "--iters", true, [&o](auto v) { return parseIntFlag("-n/--iters", v, 1, o.iters); }},
      {"-w", "--warmup_iters", true, [&o](auto v) { return parseIntFlag("-w/--warmup_iters", v, 0, o.warmupIters); }},
      {"-c", "--check", true,
       [&o](auto v) {
         CHIMERA_CHECK_ARG(v == "0" || v == "1", "-c/--check: expected 0 or 1, got '{}'", v);
         o.check = v == "1";
         return Status::ok();
       }},
      {"-d", "--datatype", true,
       [&o](auto v) { return parseList("-d/--datatype", v, kAllDataTypes, &parseDataType, o.dataTypes); }},
      {"-o", "--op", true, [&o](auto v) { return parseList("-o/--op", v, kAllReduceOps, &parseReduceOp, o.ops); }},
      {"-C", "--collective", true,
       [&o](auto v) {
         const Status status = parseCollective(v, o.collective);
         if (!status.isOk()) return Status::invalidArgument("-C/--collective: " + status.message());
         return Status::ok();
       }},
      {"-r", "--root", true, [&o](auto v) { return parseIntFlag("-r/--root", v, 0, o.root); }},
      {"", "--mesh", true, [&o](auto v) { return o.mesh = v, Status::ok(); }},
      {"", "--axis", true, [&o](auto v) { return o.axis = v, Status::ok(); }},
      {"", "--json", true,
       [&o](auto v) {
         CHIMERA_CHECK_ARG(!v.empty(), "--json: empty file name");
         return o.jsonPath = v, Status::ok();
       }},
      {"", "--seed", true, [&o](auto v) { return parseIntFlag<std::uint64_t>("--seed", v, 0, o.seed); }},
      {"", "--stat", true, [&o](auto v) { return o.statGiven = true, parseStat(v, o.stat); }},
      {"", "--scenario", true, [&o](auto v) { return setText("--scenario", v, o.scenario); }},
      {"", "--chain", true, [&o](auto v) { return setText("--chain", v, o.chain); }},
      {"", "--from", true, [&o](auto v) { return setText("--from", v, o.from); }},
      {"", "--consume", true, [&o](auto v) { return setText("--consume", v, o.consume); }},
      {"", "--topology", true, [&o](auto v) { return setText("--topology", v, o.topology); }},
      {"", "--backend", true,
       [&o](auto v) {
         CHIMERA_CHECK_ARG(v == "mpi" || v == "nccl", "--backend: expected mpi or nccl, got '{}'", v);
         return o.backend = v, Status::ok();
       }},
      {"", "--chunks", true,
       [&o](auto v) {
         if (v == "auto") return o.chunks = 0, Status::ok();
         return parseIntFlag<int>("--chunks", v, 1, o.chunks);
       }},
      {"", "--only", true,
       [&o](auto v) {
         CHIMERA_CHECK_ARG(v == "baseline" || v == "fused", "--only: expected baseline or fused, got '{}'", v);
         return o.only = v, Status::ok();
       }},
      {"", "--calibrate", false, [&o](auto) { return o.calibrate = true, Status::ok(); }},
      {"", "--out", true, [&o](auto v) { return setText("--out", v, o.outPath); }},
      {"-h", "--help", false, [&o](auto) { return o.help = true, Status::ok(); }},
  };
}

/// Flags of one mode used with another, or a mode missing what it needs.
Status checkModes(const Options& options) {
  CHIMERA_CHECK_ARG(options.scenario.empty() || options.chain.empty(), "--scenario and --chain exclude each other");
  CHIMERA_CHECK_ARG(options.chain.empty() == options.from.empty(), "--chain and --from go together");
  CHIMERA_CHECK_ARG(options.consume.empty() || !options.chain.empty(), "--consume needs --chain");
  CHIMERA_CHECK_ARG(!options.calibrate || !options.chainMode(), "--calibrate excludes --scenario and --chain");
  CHIMERA_CHECK_ARG(options.calibrate == !options.outPath.empty(), "--calibrate and --out FILE go together");
  CHIMERA_CHECK_ARG(options.axis.empty() || !(options.calibrate || options.chainMode()),
                    "--axis applies to -C only (a chain names its own axes)");
  CHIMERA_CHECK_ARG(options.chunks == 0 || options.chainMode(), "--chunks applies to --scenario and --chain");
  CHIMERA_CHECK_ARG(options.only.empty() || options.chainMode(), "--only applies to --scenario and --chain");
  CHIMERA_CHECK_ARG(options.topology.empty() || options.calibrate || options.chainMode(),
                    "--topology applies to --scenario, --chain and --calibrate");
  CHIMERA_CHECK_ARG(options.backend != "nccl" || options.calibrate || options.chainMode(),
                    "--backend nccl applies to --scenario, --chain and --calibrate (-C compares with plain MPI on "
                    "host memory)");
  if (!options.scenario.empty() && options.scenario != "all") {
    ScenarioText preset;
    CHIMERA_RETURN_IF_ERROR(findScenario(options.scenario, preset));
  }
  return Status::ok();
}

Status checkConsistency(const Options& options) {
  CHIMERA_CHECK_ARG(options.minBytes <= options.maxBytes, "-b/--minbytes {} is larger than -e/--maxbytes {}",
                    options.minBytes, options.maxBytes);
  CHIMERA_CHECK_ARG(options.stepFactor >= 2 || options.minBytes == options.maxBytes,
                    "-f/--stepfactor must be at least 2 when -b ({}) < -e ({})", options.minBytes, options.maxBytes);
  return checkModes(options);
}

}  // namespace

Status parseOptions(const std::vector<std::string>& args, Options& out) {
  Options options;
  CHIMERA_RETURN_IF_ERROR(detail::parseFlags(args, flagTable(options)));
  if (!options.help) CHIMERA_RETURN_IF_ERROR(checkConsistency(options));
  out = std::move(options);
  return Status::ok();
}

std::vector<std::size_t> sizeSeries(const Options& options) {
  std::vector<std::size_t> sizes;
  for (std::size_t size = options.minBytes; size <= options.maxBytes;) {
    sizes.push_back(size);
    if (options.stepFactor < 2 || size > std::numeric_limits<std::size_t>::max() / options.stepFactor) break;
    size *= options.stepFactor;
  }
  return sizes;
}

std::string usageText() {
  return R"(usage: mpirun -np N chimera-bench [options]
Measures one collective of chimera's MPI backend (out-of-place and in-place) against the plain
MPI call, nccl-tests style, or a chain of collectives as written against chimera's fused plan
(--scenario, --chain).
  -C, --collective NAME    allreduce|reducescatter|allgather|alltoall|broadcast|sendrecv (allreduce)
  -b, --minbytes SIZE      smallest size per rank, K/M/G suffixes (32M)
  -e, --maxbytes SIZE      largest size per rank (32M)
  -f, --stepfactor N       multiply the size by N between rows (2)
  -n, --iters N            timed iterations per row (20)
  -w, --warmup_iters N     untimed iterations before timing (5)
  -c, --check 0|1          check every element of ours (out-of-place, in-place) and of the baseline (1)
  -d, --datatype LIST      float,double,half,bfloat16,int32,int64,uint8 (or f32,...), or all (float)
  -o, --op LIST            sum,prod,min,max,avg or all; reducing collectives only (sum)
  -r, --root N             broadcast root, as an index in the group (0)
      --mesh TEXT          mesh over the world ranks, e.g. "pp=2,tp=4" (flat)
      --axis AXES          run on the groups along these axes, e.g. "tp" or "dp+tp" (all axes)
      --stat mean|median   per-rank statistic of the iteration times (mean)
      --seed N             seed of the input values (1)
      --json FILE          also write the rows as JSON
Chains, baseline vs fused (docs/benchmarks.md "Scenarios"; median by default):
      --scenario NAME|all  tp_sp, tp_pp, tp_ep, sp_ep, pp_sp, pp_ep, or all six
      --chain OPS          a chain, e.g. "allreduce:tp,send:pp" (with --from, --mesh)
      --from LAYOUT        start layout, e.g. "pp=@0,tp=P"
      --consume LAYOUT     consumed layout (default: the chain's final layout)
      --topology NAME|FILE cost model preset or calibrated profile (host)
      --backend mpi|nccl   nccl: device buffers, CUDA-event timing (nccl if built with CUDA and a GPU is present)
      --chunks N|auto      chunks of the pipelined fused plan timed next to the fused one (auto: the cost model's)
      --only baseline|fused  run and time only this program, no pipelined one (one side's link bytes)
Calibration:
      --calibrate --out FILE  measure the backend, fit the cost model, write the profile (-b 64K -e 16M)
  -h, --help               this text
Exit status: 0 ok, 1 some element was wrong (ours, out-of-place or in-place, or the baseline's), 2 bad usage or a failed call.
)";
}

}  // namespace chimera::bench
