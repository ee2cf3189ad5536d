// SPDX-License-Identifier: Apache-2.0
// Implements the benchmark's input values: exact in every DataType, computable on any rank.
#include "input_pattern.hpp"

#include <algorithm>
#include <utility>

#include "common/hash.hpp"
#include "core/check.hpp"

namespace chimera::bench {
namespace {

using detail::splitmix64;

/// Largest M such that every integer in [0, M] is exact in `dtype` (capped at 2^24).
std::uint64_t exactLimit(DataType dtype) {
  switch (dtype) {
    case DataType::U8: return 255;
    case DataType::BF16: return 256;
    case DataType::F16: return 2048;
    default: return std::uint64_t{1} << 24;
  }
}

int maxTwos(DataType dtype) {
  switch (dtype) {
    case DataType::U8: return 7;
    case DataType::F16: return 15;
    default: return 30;
  }
}

std::uint64_t valueRange(DataType dtype, std::optional<ReduceOp> op, std::uint64_t n) {
  const std::uint64_t limit = exactLimit(dtype);
  if (!op) return limit + 1;
  switch (*op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return limit > n ? std::max<std::uint64_t>(1, (limit - n) / n) : 1;
    case ReduceOp::Min:
    case ReduceOp::Max: return std::min<std::uint64_t>(limit + 1, 200);
    case ReduceOp::Prod: break;
  }
  return 2;
}

}  // namespace

InputPattern::InputPattern(std::uint64_t seed, DataType dtype, std::optional<ReduceOp> op, std::vector<int> groupRanks)
    : seed_(splitmix64(seed)), op_(op), groupRanks_(std::move(groupRanks)) {
  CHIMERA_ASSERT(!groupRanks_.empty());
  const auto n = static_cast<std::uint64_t>(groupRanks_.size());
  range_ = valueRange(dtype, op, n);
  twos_ = std::min(static_cast<int>(n), maxTwos(dtype));
}

std::uint64_t InputPattern::draw(int member, std::size_t index) const {
  const auto worldRank = static_cast<std::uint64_t>(groupRanks_[static_cast<std::size_t>(member)]);
  return splitmix64(seed_ ^ splitmix64(worldRank * 0x100000001B3ull + static_cast<std::uint64_t>(index)));
}

double InputPattern::value(int member, std::size_t index) const {
  const int n = groupSize();
  if (op_ == ReduceOp::Prod) {
    const auto rotation = static_cast<int>(splitmix64(seed_ ^ index) % static_cast<std::uint64_t>(n));
    return (member + rotation) % n < twos_ ? 2.0 : 1.0;
  }
  const std::uint64_t own = draw(member, index) % range_;
  if (op_ != ReduceOp::Avg || member != n - 1) return static_cast<double>(own);
  std::uint64_t sum = 0;
  for (int m = 0; m < n; ++m) sum += draw(m, index) % range_;
  const auto un = static_cast<std::uint64_t>(n);
  return static_cast<double>(own + (un - sum % un) % un);
}

double InputPattern::reduced(std::size_t index) const {
  CHIMERA_ASSERT(op_.has_value());
  const int n = groupSize();
  double result = value(0, index);
  for (int m = 1; m < n; ++m) {
    const double v = value(m, index);
    switch (*op_) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: result += v; break;
      case ReduceOp::Prod: result *= v; break;
      case ReduceOp::Min: result = std::min(result, v); break;
      case ReduceOp::Max: result = std::max(result, v); break;
    }
  }
  return *op_ == ReduceOp::Avg ? result / n : result;
}

}  // namespace chimera::bench
