// SPDX-License-Identifier: Apache-2.0
// Input values of chimera-bench as a pure function of (seed, world rank, index), chosen so
// that every reduction is exact in every DataType and any rank can compute any other
// rank's inputs and the expected results locally.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "chimera/types.hpp"

namespace chimera::bench {

/// The inputs of one group for one (dtype, op). Values are small non-negative integers:
/// - no op (data movement): uniform in [0, m) with m the exact-integer range of the type,
///   capped at 2^24 (u8 256, bf16 256, f16 2048);
/// - sum and avg: uniform in [0, m) with m*n + n within the type's exact range, and for avg
///   the last group member's value raised by up to n-1 so that the sum is a multiple of n
///   (the average is then an exact integer);
/// - min and max: uniform in [0, min(range, 200));
/// - prod: 1 or 2, with exactly K = min(n, kmax) twos per element (kmax 7 for u8, 15 for
///   f16, 30 otherwise), placed on group members rotating with a hash of the index so that
///   every member contributes a 2 somewhere and the product is exactly 2^K.
class InputPattern {
 public:
  /// `groupRanks`: world ranks of the group by group index. `op` is empty for collectives
  /// that do not reduce. Precondition: groupRanks is not empty.
  InputPattern(std::uint64_t seed, DataType dtype, std::optional<ReduceOp> op, std::vector<int> groupRanks);

  /// Input element `index` of the group member with group index `member`.
  double value(int member, std::size_t index) const;
  /// The op-reduction over the group of element `index` (avg: sum / n, exact by construction).
  /// Precondition: the pattern was built with an op.
  double reduced(std::size_t index) const;
  /// Number of group members.
  int groupSize() const { return static_cast<int>(groupRanks_.size()); }

 private:
  std::uint64_t draw(int member, std::size_t index) const;

  std::uint64_t seed_;
  std::optional<ReduceOp> op_;
  std::vector<int> groupRanks_;
  std::uint64_t range_ = 1;
  int twos_ = 0;
};

}  // namespace chimera::bench
