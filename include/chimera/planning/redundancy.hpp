// SPDX-License-Identifier: Apache-2.0
// Redundancy analysis (unstable tier): the bytes a chain moves that its consumer never
// reads, per op and in total.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera {

/// Bytes of one chain op, by the bandwidth-optimal formulas (see PlanBytes), and how many
/// of them carry data no consumer ever reads.
struct OpBytes {
  std::string op;                    ///< text form ("allreduce:tp")
  std::int64_t localBytes = 0;       ///< L: a participating rank's buffer before the op
  int groupSize = 1;                 ///< n
  int participants = 0;              ///< ranks that take part (holders of the input)
  std::int64_t bytesPerRankMax = 0;  ///< most bytes one rank sends
  std::int64_t bytesTotal = 0;       ///< all ranks together
  /// Bytes sent whose data is never consumed: delivered to a rank that never reads them
  /// (AllGather, AllToAll, Send, Broadcast), contributions to reductions of elements
  /// nobody reads (ReduceScatter), and for AllReduce both of those, counting each rank's
  /// own reduced chunk as one it reads when it reads any.
  std::int64_t unconsumedTotal = 0;
};

/// The redundancy analysis of a chain.
struct ChainAnalysis {
  std::vector<OpBytes> ops;
  std::int64_t bytesTotal = 0;       ///< sum over ops
  std::int64_t bytesPerRankMax = 0;  ///< max over ranks of the bytes each rank sends over the chain
  std::int64_t unconsumedTotal = 0;  ///< sum over ops of unconsumedTotal
  /// False when the liveness analysis was too large to run (ranks x grid cells above
  /// 2^27): the byte counts are exact, every unconsumed count is 0 and unknown.
  bool unconsumedAnalysed = true;
};

/// Analyses a traced chain whose consumer reads `consumed`. Liveness runs backward from
/// the consumed boxes over a grid of the finest shards any layout of the chain uses.
/// InvalidArgument when `consumed` is not readable after the chain. When the grid exceeds
/// 2^22 cells, or ranks x cells exceeds 2^27 (the masks of a world-sized group of 10^4
/// ranks), only the byte counts are filled in and `unconsumedAnalysed` is false.
[[nodiscard]] Status analyzeChain(const ChainTrace& trace, const Layout& consumed, const TensorSpec& spec,
                                  ChainAnalysis& out);

}  // namespace chimera
