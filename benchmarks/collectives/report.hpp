// SPDX-License-Identifier: Apache-2.0
// chimera-bench output: the nccl-tests-style table (rank 0 prints it) and the --json document.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chimera/types.hpp"
#include "common/json.hpp"

namespace chimera::bench {

/// The in-place group of a row (nccl-tests' second group of columns): our call with send
/// and recv inside one buffer, timed and checked like the out-of-place call.
struct InPlaceResult {
  /// Our in-place time per iteration, microseconds.
  double timeUs = 0.0;
  /// bytes / time, GB/s (1e9 bytes).
  double algbwGBps = 0.0;
  /// algbw times the collective's bus-bandwidth factor.
  double busbwGBps = 0.0;
  /// Wrong elements of the in-place result over all ranks; empty when not checked (-c 0).
  std::optional<std::uint64_t> wrong;
};

/// One measured row, already agreed over ranks (times: max over ranks; wrong: sum over ranks).
struct ResultRow {
  /// `size` column: bytes of the larger per-rank buffer.
  std::size_t bytes = 0;
  /// `count` column: the count argument of the call.
  std::size_t count = 0;
  /// `type` column.
  DataType dtype = DataType::F32;
  /// Empty for collectives that do not reduce (printed "none").
  std::optional<ReduceOp> op;
  /// Our time per iteration, microseconds.
  double timeUs = 0.0;
  /// bytes / time, GB/s (1e9 bytes).
  double algbwGBps = 0.0;
  /// algbw times the collective's bus-bandwidth factor.
  double busbwGBps = 0.0;
  /// Wrong elements of our result over all ranks; empty when not checked (-c 0).
  std::optional<std::uint64_t> wrong;
  /// The in-place group; empty when the collective has no in-place form (printed n/a).
  std::optional<InPlaceResult> inPlace;
  /// Baseline time per iteration; empty when the baseline could not run (n/a).
  std::optional<double> baselineTimeUs;
  /// Wrong elements of the baseline's result over all ranks; empty when not checked or not run.
  std::optional<std::uint64_t> baselineWrong;
};

/// Fills algbw and busbw of `row` (and of its in-place group, when present) from bytes, the
/// times and the bus-bandwidth `factor`.
void computeBandwidth(ResultRow& row, double factor);
/// baseline / ours (out-of-place), or empty when there is no baseline time or ours is 0.
std::optional<double> speedup(const ResultRow& row);

/// What the run was, for the table banner and the JSON header.
struct RunInfo {
  /// The -C name ("allreduce").
  std::string collective;
  /// World size.
  int nranks = 0;
  /// Our backend's name ("mpi").
  std::string backend;
  /// The mesh as text ("pp=2,tp=4", or "world=8" when flat).
  std::string mesh;
  /// The group's axes ("tp", "dp+tp").
  std::string axis;
  /// Ranks per group.
  int groupSize = 0;
  /// The baseline call ("MPI_Allreduce").
  std::string baseline;
  /// -n and -w.
  int iters = 0;
  int warmupIters = 0;
  /// "mean" or "median".
  std::string stat;
  /// Broadcast root (group index); empty for other collectives.
  std::optional<int> root;
};

/// The banner, the group captions (out-of-place, in-place) and the two column-header lines,
/// each starting with '#', ending in '\n'.
std::string tableHeader(const RunInfo& info);
/// One table line (ends in '\n'): the out-of-place group, the in-place group, baseline and
/// speedup; n/a for a missing baseline or in-place group, N/A for an unchecked #wrong.
std::string tableRow(const ResultRow& row);
/// The closing lines, as nccl-tests ends its table: our wrong elements over all rows, both
/// groups together, then out-of-place, in-place and the baseline's apart (N/A when
/// unchecked), and the average out-of-place busbw over the rows.
std::string tableFooter(const std::vector<ResultRow>& rows);
/// {"collective", "nranks", "backend", "mesh", "axis", "group_size", "baseline", "stat",
///  "iters", "warmup_iters", "baseline_wrong", "rows": [{"bytes", "count", "dtype", "op",
///  "time_us", "algbw_gbps", "busbw_gbps", "wrong", "in_place_time_us", "in_place_algbw_gbps",
///  "in_place_busbw_gbps", "in_place_wrong", "baseline_time_us", "speedup"}]}; missing values
/// (an unchecked #wrong, an in-place group that is n/a, a baseline that could not run) are null. "baseline_wrong" is
/// the baseline's wrong elements over all rows.
detail::Json reportJson(const RunInfo& info, const std::vector<ResultRow>& rows);

}  // namespace chimera::bench
