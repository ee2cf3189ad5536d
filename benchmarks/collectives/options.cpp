// SPDX-License-Identifier: Apache-2.0
// Implements chimera-bench's command line: nccl-tests flags plus chimera's own.
#include "options.hpp"
#include "common/size_text.hpp"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <limits>

#include "core/check.hpp"
#include "core/type_lists.hpp"
#include "scenario.hpp"

namespace chimera::bench {
namespace {

using Setter = std::function<Status(std::string_view value, Options& options)>;

/// One flag: its short and long spellings and how its value is applied.
struct Flag {
  std::string_view shortName;  // "-b"; empty when there is none
  std::string_view longName;   // "--minbytes"
  bool takesValue = true;
  Setter set;
};

template <typename Int>
Status parseInt(std::string_view flag, std::string_view text, Int minimum, Int& out) {
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  CHIMERA_CHECK_ARG(error == std::errc() && end == text.data() + text.size(), "{}: malformed number '{}'", flag,
                    text);
  CHIMERA_CHECK_ARG(value >= minimum, "{}: {} is below the minimum {}", flag, text, minimum);
  out = value;
  return Status::ok();
}

Status parseSizeFlag(std::string_view flag, std::string_view text, std::size_t& out) {
  const Status status = parseSize(text, out);
  if (!status.isOk()) return Status::invalidArgument(fmt::format("{}: {}", flag, status.message()));
  CHIMERA_CHECK_ARG(out > 0, "{}: size must be at least 1 byte", flag);
  return Status::ok();
}

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

std::vector<Flag> flagTable() {
  return {
      {"-b", "--minbytes", true,
       [](auto v, auto& o) { return o.sizesGiven = true, parseSizeFlag("-b/--minbytes", v, o.minBytes); }},
      {"-e", "--maxbytes", true,
       [](auto v, auto& o) { return o.sizesGiven = true, parseSizeFlag("-e/--maxbytes", v, o.maxBytes); }},
      {"-f", "--stepfactor", true,
       [](auto v, auto& o) { return parseInt<std::size_t>("-f/--stepfactor", v, 1, o.stepFactor); }},
      {"-n", "--iters", true, [](auto v, auto& o) { return parseInt("-n/--iters", v, 1, o.iters); }},
      {"-w", "--warmup_iters", true,
       [](auto v, auto& o) { return parseInt("-w/--warmup_iters", v, 0, o.warmupIters); }},
      {"-c", "--check", true,
       [](auto v, auto& o) {
         CHIMERA_CHECK_ARG(v == "0" || v == "1", "-c/--check: expected 0 or 1, got '{}'", v);
         o.check = v == "1";
         return Status::ok();
       }},
      {"-d", "--datatype", true,
       [](auto v, auto& o) { return parseList("-d/--datatype", v, kAllDataTypes, &parseDataType, o.dataTypes); }},
      {"-o", "--op", true,
       [](auto v, auto& o) { return parseList("-o/--op", v, kAllReduceOps, &parseReduceOp, o.ops); }},
      {"-C", "--collective", true,
       [](auto v, auto& o) {
         const Status status = parseCollective(v, o.collective);
         if (!status.isOk()) return Status::invalidArgument("-C/--collective: " + status.message());
         return Status::ok();
       }},
      {"-r", "--root", true, [](auto v, auto& o) { return parseInt("-r/--root", v, 0, o.root); }},
      {"", "--mesh", true, [](auto v, auto& o) { return o.mesh = v, Status::ok(); }},
      {"", "--axis", true, [](auto v, auto& o) { return o.axis = v, Status::ok(); }},
      {"", "--json", true,
       [](auto v, auto& o) {
         CHIMERA_CHECK_ARG(!v.empty(), "--json: empty file name");
         return o.jsonPath = v, Status::ok();
       }},
      {"", "--seed", true,
       [](auto v, auto& o) { return parseInt<std::uint64_t>("--seed", v, 0, o.seed); }},
      {"", "--stat", true, [](auto v, auto& o) { return o.statGiven = true, parseStat(v, o.stat); }},
      {"", "--scenario", true, [](auto v, auto& o) { return setText("--scenario", v, o.scenario); }},
      {"", "--chain", true, [](auto v, auto& o) { return setText("--chain", v, o.chain); }},
      {"", "--from", true, [](auto v, auto& o) { return setText("--from", v, o.from); }},
      {"", "--consume", true, [](auto v, auto& o) { return setText("--consume", v, o.consume); }},
      {"", "--topology", true, [](auto v, auto& o) { return setText("--topology", v, o.topology); }},
      {"", "--backend", true,
       [](auto v, auto& o) {
         CHIMERA_CHECK_ARG(v == "mpi" || v == "nccl", "--backend: expected mpi or nccl, got '{}'", v);
         return o.backend = v, Status::ok();
       }},
      {"", "--chunks", true,
       [](auto v, auto& o) {
         if (v == "auto") return o.chunks = 0, Status::ok();
         return parseInt<int>("--chunks", v, 1, o.chunks);
       }},
      {"", "--calibrate", false, [](auto, auto& o) { return o.calibrate = true, Status::ok(); }},
      {"", "--out", true, [](auto v, auto& o) { return setText("--out", v, o.outPath); }},
      {"-h", "--help", false, [](auto, auto& o) { return o.help = true, Status::ok(); }},
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
                    "-f/--stepfactor must be at least 2 when -b ({}) < -e ({})", options.minBytes,
                    options.maxBytes);
  return checkModes(options);
}

}  // namespace

Status parseOptions(const std::vector<std::string>& args, Options& out) {
  const std::vector<Flag> flags = flagTable();
  Options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    std::string_view inlineValue;
    bool hasInlineValue = false;
    if (arg.starts_with("--")) {
      if (const std::size_t eq = arg.find('='); eq != std::string_view::npos) {
        inlineValue = arg.substr(eq + 1);
        hasInlineValue = true;
        arg = arg.substr(0, eq);
      }
    }
    const Flag* flag = nullptr;
    for (const Flag& candidate : flags) {
      if (arg == candidate.longName || (!candidate.shortName.empty() && arg == candidate.shortName)) flag = &candidate;
    }
    CHIMERA_CHECK_ARG(flag != nullptr, "unknown option '{}' (see -h)", args[i]);
    if (!flag->takesValue) {
      CHIMERA_CHECK_ARG(!hasInlineValue, "{} takes no value", arg);
      CHIMERA_RETURN_IF_ERROR(flag->set({}, options));
      continue;
    }
    if (!hasInlineValue) {
      CHIMERA_CHECK_ARG(i + 1 < args.size(), "{} needs a value", arg);
      inlineValue = args[++i];
    }
    CHIMERA_RETURN_IF_ERROR(flag->set(inlineValue, options));
  }
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
Calibration:
      --calibrate --out FILE  measure the backend, fit the cost model, write the profile (-b 1M -e 16M)
  -h, --help               this text
Exit status: 0 ok, 1 some element was wrong (ours, out-of-place or in-place, or the baseline's), 2 bad usage or a failed call.
)";
}

}  // namespace chimera::bench
