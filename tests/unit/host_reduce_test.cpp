// SPDX-License-Identifier: Apache-2.0
// Host f16/bf16 conversion (round to nearest even) and host_reduce for every dtype and op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/half.hpp"
#include "common/host_reduce.hpp"

namespace chimera::detail {
namespace {

TEST(Half, ExactValuesRoundTrip) {
  for (const float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0x1p-14f, 0x1p-24f, 1000.0f, -0.125f})
    EXPECT_EQ(halfToFloat(floatToHalf(v)), v) << v;
  EXPECT_EQ(floatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(floatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(halfToFloat(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(floatToHalf(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): rounds up.
  EXPECT_EQ(floatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);
  // Just above the halfway point rounds up.
  EXPECT_EQ(floatToHalf(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
  // Subnormal tie: 2^-25 is halfway between 0 and 2^-24 -> 0; 3*2^-25 -> 2*2^-24.
  EXPECT_EQ(floatToHalf(0x1p-25f), 0x0000);
  EXPECT_EQ(floatToHalf(3 * 0x1p-25f), 0x0002);
  // Largest value that still rounds down to 65504, and the first that overflows.
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);
}

TEST(Half, InfinityAndNaN) {
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(floatToHalf(-1e10f), 0xfc00);
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(halfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(floatToBf16(1.0f + 0x1p-8f), 0x3f80);      // tie -> even
  EXPECT_EQ(floatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(floatToBf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
  EXPECT_EQ(bf16ToFloat(floatToBf16(256.0f)), 256.0f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(257.0f)), 256.0f);  // 8 significant bits
}

template <typename T>
std::vector<T> reduced(std::vector<T> a, const std::vector<T>& b, DataType dtype, ReduceOp op) {
  reduceInto(a.data(), b.data(), a.size(), dtype, op);
  return a;
}

TEST(HostReduce, EveryOpOnNativeTypes) {
  const std::vector<float> a = {1, -2, 3.5f, 0};
  const std::vector<float> b = {4, 5, -1, 0};
  EXPECT_EQ(reduced(a, b, DataType::F32, ReduceOp::Sum), (std::vector<float>{5, 3, 2.5f, 0}));
  EXPECT_EQ(reduced(a, b, DataType::F32, ReduceOp::Avg), (std::vector<float>{5, 3, 2.5f, 0}));  // summed; divided later
  EXPECT_EQ(reduced(a, b, DataType::F32, ReduceOp::Prod), (std::vector<float>{4, -10, -3.5f, 0}));
  EXPECT_EQ(reduced(a, b, DataType::F32, ReduceOp::Min), (std::vector<float>{1, -2, -1, 0}));
  EXPECT_EQ(reduced(a, b, DataType::F32, ReduceOp::Max), (std::vector<float>{4, 5, 3.5f, 0}));
  const std::vector<double> c = {1e300, -1};
  EXPECT_EQ(reduced(c, {1e300, 3}, DataType::F64, ReduceOp::Max), (std::vector<double>{1e300, 3}));
  EXPECT_EQ(reduced<std::int64_t>({1LL << 40, -7}, {3, 2}, DataType::I64, ReduceOp::Prod),
            (std::vector<std::int64_t>{3LL << 40, -14}));
  EXPECT_EQ(reduced<std::int32_t>({-5, 9}, {2, -9}, DataType::I32, ReduceOp::Min), (std::vector<std::int32_t>{-5, -9}));
}

TEST(HostReduce, IntegersWrapInsteadOfOverflowing) {
  EXPECT_EQ(reduced<std::uint8_t>({200, 16}, {100, 16}, DataType::U8, ReduceOp::Sum),
            (std::vector<std::uint8_t>{44, 32}));
  EXPECT_EQ(reduced<std::uint8_t>({16, 3}, {16, 5}, DataType::U8, ReduceOp::Prod), (std::vector<std::uint8_t>{0, 15}));
  const std::int32_t big = std::numeric_limits<std::int32_t>::max();
  EXPECT_EQ(reduced<std::int32_t>({big}, {1}, DataType::I32, ReduceOp::Sum),
            (std::vector<std::int32_t>{std::numeric_limits<std::int32_t>::min()}));
}

TEST(HostReduce, SixteenBitFloatsRoundBackToNearestEven) {
  std::vector<std::uint16_t> a = {floatToHalf(1.0f), floatToHalf(2048.0f), floatToHalf(-3.0f)};
  const std::vector<std::uint16_t> b = {floatToHalf(0.5f), floatToHalf(1.0f), floatToHalf(7.0f)};
  reduceInto(a.data(), b.data(), a.size(), DataType::F16, ReduceOp::Sum);
  EXPECT_EQ(halfToFloat(a[0]), 1.5f);
  EXPECT_EQ(halfToFloat(a[1]), 2048.0f);  // 2049 is a tie between 2048 and 2050: even wins
  EXPECT_EQ(halfToFloat(a[2]), 4.0f);
  std::vector<std::uint16_t> c = {floatToBf16(3.0f), floatToBf16(-1.0f)};
  const std::vector<std::uint16_t> d = {floatToBf16(5.0f), floatToBf16(-4.0f)};
  reduceInto(c.data(), d.data(), c.size(), DataType::BF16, ReduceOp::Max);
  EXPECT_EQ(bf16ToFloat(c[0]), 5.0f);
  EXPECT_EQ(bf16ToFloat(c[1]), -1.0f);
}

TEST(HostReduce, ThreeOperandFormAllowsExactAliasing) {
  const std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {10, 20, 30};
  std::vector<float> out(3);
  reduceTo(out.data(), a.data(), b.data(), 3, DataType::F32, ReduceOp::Sum);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  std::vector<float> aliased = b;
  reduceTo(aliased.data(), a.data(), aliased.data(), 3, DataType::F32, ReduceOp::Min);
  EXPECT_EQ(aliased, (std::vector<float>{1, 2, 3}));
  std::vector<std::int64_t> twice = {3, -4};
  reduceTo(twice.data(), twice.data(), twice.data(), 2, DataType::I64, ReduceOp::Prod);
  EXPECT_EQ(twice, (std::vector<std::int64_t>{9, 16}));
}

TEST(HostReduce, DivideByCountFinishesAvg) {
  std::vector<std::int32_t> ints = {7, -7, 8};
  divideByCount(ints.data(), ints.size(), DataType::I32, 2);
  EXPECT_EQ(ints, (std::vector<std::int32_t>{3, -3, 4}));  // truncation toward zero
  std::vector<std::uint8_t> bytes = {255, 1};
  divideByCount(bytes.data(), bytes.size(), DataType::U8, 4);
  EXPECT_EQ(bytes, (std::vector<std::uint8_t>{63, 0}));
  std::vector<double> doubles = {1.0, 3.0};
  divideByCount(doubles.data(), doubles.size(), DataType::F64, 3);
  EXPECT_EQ(doubles, (std::vector<double>{1.0 / 3.0, 1.0}));
  std::vector<std::uint16_t> halves = {floatToHalf(3.0f)};
  divideByCount(halves.data(), halves.size(), DataType::F16, 2);
  EXPECT_EQ(halfToFloat(halves[0]), 1.5f);
  std::vector<float> unchanged = {5.0f};
  divideByCount(unchanged.data(), 1, DataType::F32, 1);
  EXPECT_EQ(unchanged[0], 5.0f);
}

}  // namespace
}  // namespace chimera::detail
