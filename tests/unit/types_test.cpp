// SPDX-License-Identifier: Apache-2.0
// Tests Status, element types, reduction operators and byte sizes: names, parsing, bad input.
#include <gtest/gtest.h>

#include "chimera/status.hpp"
#include "chimera/types.hpp"
#include "common/size_text.hpp"
#include "core/type_lists.hpp"

namespace chimera {
namespace {

TEST(Status, DefaultIsOkAndErrorsCarryCodeAndMessage) {
  EXPECT_TRUE(Status().isOk());
  EXPECT_EQ(Status::ok().toString(), "ok");
  const Status bad = Status::invalidArgument("count 7 not divisible by 4 ranks");
  EXPECT_FALSE(bad.isOk());
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(bad.toString(), "invalid argument: count 7 not divisible by 4 ranks");
  EXPECT_EQ(Status::mismatch("x").code(), StatusCode::Mismatch);
}

TEST(DataType, SizesAndNamesRoundTrip) {
  EXPECT_EQ(dataTypeSize(DataType::F32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::F64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::F16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::BF16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::I32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::I64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::U8), 1u);
  for (DataType type : kAllDataTypes) {
    DataType parsed = DataType::U8;
    ASSERT_TRUE(parseDataType(dataTypeName(type), parsed).isOk());
    EXPECT_EQ(parsed, type);
  }
  DataType parsed = DataType::F32;
  ASSERT_TRUE(parseDataType("bf16", parsed).isOk());
  EXPECT_EQ(parsed, DataType::BF16);
  const Status bad = parseDataType("f128", parsed);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.message().find("f128"), std::string::npos);
}

TEST(ReduceOp, NamesRoundTripAndUnknownIsRejected) {
  for (ReduceOp op : kAllReduceOps) {
    ReduceOp parsed = ReduceOp::Sum;
    ASSERT_TRUE(parseReduceOp(reduceOpName(op), parsed).isOk());
    EXPECT_EQ(parsed, op);
  }
  ReduceOp parsed = ReduceOp::Sum;
  const Status bad = parseReduceOp("xor", parsed);
  EXPECT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("xor"), std::string::npos);
}

TEST(Size, ParsesSuffixesAndRejectsGarbage) {
  std::size_t value = 0;
  ASSERT_TRUE(parseSize("4096", value).isOk());
  EXPECT_EQ(value, 4096u);
  ASSERT_TRUE(parseSize("64K", value).isOk());
  EXPECT_EQ(value, 64u << 10);
  ASSERT_TRUE(parseSize("32M", value).isOk());
  EXPECT_EQ(value, 32u << 20);
  ASSERT_TRUE(parseSize("1G", value).isOk());
  EXPECT_EQ(value, std::size_t{1} << 30);
  ASSERT_TRUE(parseSize("8kb", value).isOk());
  EXPECT_EQ(value, 8u << 10);
  EXPECT_FALSE(parseSize("", value).isOk());
  EXPECT_FALSE(parseSize("M", value).isOk());
  EXPECT_FALSE(parseSize("12X", value).isOk());
  EXPECT_FALSE(parseSize("12MM", value).isOk());
  EXPECT_FALSE(parseSize("99999999999999999999999", value).isOk());
  EXPECT_FALSE(parseSize("99999999999999999G", value).isOk());
  EXPECT_EQ(formatSize(32u << 20), "32M");
  EXPECT_EQ(formatSize(1000), "1000");
}

}  // namespace
}  // namespace chimera
