// SPDX-License-Identifier: Apache-2.0
// chimera-bench command line (nccl-tests flags plus --mesh/--axis/--json/--seed/--stat).
// Parsing is a pure function of the arguments, so every rank reaches the same verdict.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"
#include "chimera/types.hpp"
#include "collective.hpp"

namespace chimera::bench {

/// Which per-rank statistic of the timed iterations becomes the `time` column.
enum class TimeStatistic { Mean, Median };

/// Everything the command line sets. Defaults follow nccl-tests where it has the flag.
struct Options {
  /// -b/--minbytes: smallest size (bytes per rank, nccl-tests' `size`).
  std::size_t minBytes = std::size_t{32} << 20;
  /// -e/--maxbytes: largest size.
  std::size_t maxBytes = std::size_t{32} << 20;
  /// -f/--stepfactor: each size is the previous one times this.
  std::size_t stepFactor = 2;
  /// -n/--iters: timed iterations per row.
  int iters = 20;
  /// -w/--warmup_iters: untimed iterations before the timed loop.
  int warmupIters = 5;
  /// -c/--check: verify every element of one extra run (ours and the baseline's).
  bool check = true;
  /// -d/--datatype: the types to run ("all" gives every DataType).
  std::vector<DataType> dataTypes{DataType::F32};
  /// -o/--op: the reduce ops to run ("all" gives every ReduceOp); ignored by non-reducing collectives.
  std::vector<ReduceOp> ops{ReduceOp::Sum};
  /// -C/--collective.
  Collective collective = Collective::AllReduce;
  /// --mesh "pp=2,tp=4"; empty: a flat mesh over the world.
  std::string mesh;
  /// --axis "tp" or "dp+tp"; empty: every axis of the mesh (the whole world).
  std::string axis;
  /// --json FILE: also write the rows as JSON (rank 0).
  std::string jsonPath;
  /// --seed: seed of the input values.
  std::uint64_t seed = 1;
  /// -r/--root: broadcast root, as an index within the group.
  int root = 0;
  /// --stat mean|median.
  TimeStatistic stat = TimeStatistic::Mean;
  /// --stat was given (scenarios default to the median, the collective mode to the mean).
  bool statGiven = false;
  /// -b or -e was given (--calibrate has its own default range).
  bool sizesGiven = false;
  /// --scenario NAME|all: run preset chains baseline vs fused (see scenario.hpp).
  std::string scenario;
  /// --chain/--from/--consume: run this chain (with --mesh) baseline vs fused.
  std::string chain;
  std::string from;
  std::string consume;
  /// --topology NAME|profile.json: the cost model for the planner and the predicted speedup;
  /// empty: the `host` preset for the world size.
  std::string topology;
  /// --backend mpi|nccl; empty: nccl when built with CUDA and a device is present, else mpi.
  std::string backend;
  /// --chunks N|auto: chunks of the pipelined fused plan timed next to the fused one in the
  /// chain modes; 0 = auto (the cost model's choice).
  int chunks = 0;
  /// --only baseline|fused: in the chain modes, time only that program (no pipelined run), so
  /// what crosses a link during the run is that program's; empty: all three.
  std::string only;
  /// --calibrate: measure the backend at calibrationPoints and fit a profile to --out.
  bool calibrate = false;
  /// --out FILE: where --calibrate writes the profile.
  std::string outPath;
  /// -h/--help was given.
  bool help = false;

  /// True for the chain modes (--scenario or --chain).
  bool chainMode() const { return !scenario.empty() || !chain.empty(); }
};

/// Parses `args` (without the program name). InvalidArgument naming the flag and value on
/// unknown flags, missing or malformed values, -b > -e, -f < 2 when -b < -e, -n < 1, -w < 0,
/// -c other than 0/1, -r < 0, an empty -d/-o list.
[[nodiscard]] Status parseOptions(const std::vector<std::string>& args, Options& out);

/// The sizes of a sweep: minBytes, minBytes*f, ... while <= maxBytes (stops before overflow).
std::vector<std::size_t> sizeSeries(const Options& options);

/// The -h text.
std::string usageText();

}  // namespace chimera::bench
