// SPDX-License-Identifier: Apache-2.0
// Tests the benchmark's input values and buffer checks for every DataType.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "buffer_check.hpp"
#include "core/type_lists.hpp"
#include "element_codec.hpp"
#include "input_pattern.hpp"

namespace chimera::bench {
namespace {

TEST(ElementCodec, SixteenBitTypesHoldThePatternRangesExactly) {
  for (int i = 0; i <= 2048; ++i) EXPECT_EQ(decodeElement(encodeElement<Half>(i)), i);
  for (int i = 0; i <= 256; ++i) EXPECT_EQ(decodeElement(encodeElement<BFloat16>(i)), i);
  EXPECT_EQ(encodeElement<Half>(1.0).bits, 0x3C00);
  EXPECT_EQ(encodeElement<BFloat16>(1.0).bits, 0x3F80);
  EXPECT_EQ(decodeElement(encodeElement<Half>(2049.0)), 2048.0);  // beyond the exact range: rounds
  EXPECT_EQ(decodeElement(encodeElement<std::uint8_t>(255.0)), 255.0);
  EXPECT_TRUE(std::isnan(decodeElement(Half{0xFFFF})));
  EXPECT_TRUE(std::isnan(decodeElement(BFloat16{0xFFFF})));
}

// Reduces member values in the storage type, in member order, the way a backend might.
double reduceInStorage(DataType dtype, ReduceOp op, const InputPattern& pattern, std::size_t index) {
  return dispatchDataType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::Type;
    double acc = decodeElement(encodeElement<T>(pattern.value(0, index)));
    for (int m = 1; m < pattern.groupSize(); ++m) {
      const double v = pattern.value(m, index);
      double next = acc;
      if (op == ReduceOp::Sum || op == ReduceOp::Avg) next = acc + v;
      if (op == ReduceOp::Prod) next = acc * v;
      if (op == ReduceOp::Min) next = std::min(acc, v);
      if (op == ReduceOp::Max) next = std::max(acc, v);
      acc = decodeElement(encodeElement<T>(next));  // every partial result rounded to T
    }
    if (op == ReduceOp::Avg) acc = decodeElement(encodeElement<T>(acc / pattern.groupSize()));
    return acc;
  });
}

TEST(InputPattern, EveryReductionIsExactInEveryType) {
  for (int n : {1, 2, 3, 4, 8, 16}) {
    std::vector<int> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(r * 3 + 1);
    for (DataType dtype : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        const InputPattern pattern(7, dtype, op, ranks);
        for (std::size_t i = 0; i < 500; ++i) {
          const double expected = pattern.reduced(i);
          ASSERT_EQ(reduceInStorage(dtype, op, pattern, i), expected)
              << dataTypeName(dtype) << " " << reduceOpName(op) << " n=" << n << " i=" << i;
          ASSERT_EQ(expected, std::floor(expected));
          const int maxTwos = dtype == DataType::U8 ? 7 : dtype == DataType::F16 ? 15 : 30;
          if (op == ReduceOp::Prod) {
            ASSERT_EQ(expected, std::ldexp(1.0, std::min(n, maxTwos)));
          }
        }
      }
    }
  }
}

TEST(InputPattern, ValuesDependOnSeedRankAndIndex) {
  const InputPattern a(1, DataType::F32, std::nullopt, {0, 1, 2, 3});
  const InputPattern b(2, DataType::F32, std::nullopt, {0, 1, 2, 3});
  const InputPattern shifted(1, DataType::F32, std::nullopt, {4, 5, 6, 7});
  int sameSeed = 0, sameRank = 0, sameGroup = 0, sameIndex = 0;
  for (std::size_t i = 0; i < 1000; ++i) {
    sameSeed += a.value(1, i) == b.value(1, i);
    sameRank += a.value(1, i) == a.value(2, i);
    sameGroup += a.value(1, i) == shifted.value(1, i);
    sameIndex += a.value(1, i) == a.value(1, i + 1);
    ASSERT_EQ(a.value(3, i), InputPattern(1, DataType::F32, std::nullopt, {0, 1, 2, 3}).value(3, i));
  }
  EXPECT_LT(sameSeed, 5);
  EXPECT_LT(sameRank, 5);
  EXPECT_LT(sameGroup, 5);
  EXPECT_LT(sameIndex, 5);
}

TEST(InputPattern, EveryMemberContributesATwoToProducts) {
  const InputPattern pattern(3, DataType::U8, ReduceOp::Prod, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::vector<int> twos(10, 0);
  for (std::size_t i = 0; i < 200; ++i) {
    for (int m = 0; m < 10; ++m) twos[static_cast<std::size_t>(m)] += pattern.value(m, i) == 2.0;
  }
  for (int count : twos) EXPECT_GT(count, 0);
}

TEST(BufferCheck, CountsExactlyThePlantedErrors) {
  for (DataType dtype : kAllDataTypes) {
    const std::size_t count = 257;
    std::vector<unsigned char> buffer(count * dataTypeSize(dtype));
    const auto valueAt = [](std::size_t i) { return static_cast<double>(i % 200); };
    fillBuffer(buffer.data(), dtype, count, valueAt);
    EXPECT_EQ(countMismatches(buffer.data(), dtype, count, valueAt), 0u) << dataTypeName(dtype);
    const auto shifted = [](std::size_t i) { return static_cast<double>(i % 200) + (i % 50 == 0 ? 1.0 : 0.0); };
    EXPECT_EQ(countMismatches(buffer.data(), dtype, count, shifted), 6u) << dataTypeName(dtype);
    poisonBuffer(buffer.data(), buffer.size());
    EXPECT_EQ(countMismatches(buffer.data(), dtype, count, valueAt), count) << dataTypeName(dtype);
  }
}

}  // namespace
}  // namespace chimera::bench
