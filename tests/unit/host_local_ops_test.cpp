// SPDX-License-Identifier: Apache-2.0
// The local (no communication) operations on host memory that the MPI backend and the
// executor use: box pack/unpack (src/box/box_ops), scaling (src/common/host_reduce) and the
// executor's block geometry, checked against element-by-element references.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "box/box_ops.hpp"
#include "common/half.hpp"
#include "common/host_reduce.hpp"
#include "exec/box_blocks.hpp"

namespace chimera::detail {
namespace {

Box makeBox(std::vector<std::int64_t> offset, std::vector<std::int64_t> extent) {
  Box box;
  box.offset = std::move(offset);
  box.extent = std::move(extent);
  return box;
}

TEST(HostLocalOps, PackThenUnpackMovesExactlyTheBox) {
  const std::vector<std::int64_t> shape{4, 6, 5};
  std::vector<std::int32_t> tensor(4 * 6 * 5);
  std::iota(tensor.begin(), tensor.end(), 0);
  const Box box = makeBox({1, 2, 1}, {2, 3, 3});
  std::vector<std::int32_t> packed(18, -1);
  ASSERT_TRUE(hostPackBox(tensor.data(), shape, box, packed.data(), DataType::I32).isOk());
  std::size_t i = 0;
  for (int a = 1; a < 3; ++a) {
    for (int b = 2; b < 5; ++b) {
      for (int c = 1; c < 4; ++c) EXPECT_EQ(packed[i++], (a * 6 + b) * 5 + c);
    }
  }
  std::vector<std::int32_t> back(tensor.size(), -7);
  ASSERT_TRUE(hostUnpackBox(packed.data(), back.data(), shape, box, DataType::I32).isOk());
  int inside = 0;
  for (std::size_t k = 0; k < back.size(); ++k) {
    if (back[k] != -7) {
      EXPECT_EQ(back[k], tensor[k]);
      ++inside;
    }
  }
  EXPECT_EQ(inside, 18);
}

TEST(HostLocalOps, BadBoxesAreInvalidArgument) {
  const std::vector<std::int64_t> shape{4, 6};
  std::vector<float> tensor(24);
  std::vector<float> packed(24);
  Status status = hostPackBox(tensor.data(), shape, makeBox({3, 0}, {2, 6}), packed.data(), DataType::F32);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("exceeds"), std::string::npos) << status.toString();
  status = hostPackBox(tensor.data(), shape, makeBox({0}, {2}), packed.data(), DataType::F32);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("dimensions"), std::string::npos) << status.toString();
  status = hostUnpackBox(nullptr, tensor.data(), shape, makeBox({0, 0}, {1, 1}), DataType::F32);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
}

TEST(HostLocalOps, ScaleFollowsTheKernelRules) {
  std::vector<float> f{1.5f, -2.0f, 0.0f};
  ASSERT_TRUE(hostScale(f.data(), f.data(), f.size(), DataType::F32, 4.0).isOk());
  EXPECT_EQ(f, (std::vector<float>{6.0f, -8.0f, 0.0f}));
  std::vector<std::int32_t> i{7, -7, std::numeric_limits<std::int32_t>::max()};
  std::vector<std::int32_t> out(3);
  ASSERT_TRUE(hostScale(i.data(), out.data(), i.size(), DataType::I32, 2.5).isOk());
  EXPECT_EQ(out, (std::vector<std::int32_t>{17, -17, std::numeric_limits<std::int32_t>::max()}));
  std::vector<std::uint16_t> b{floatToBf16(3.0f)};
  ASSERT_TRUE(hostScale(b.data(), b.data(), 1, DataType::BF16, 8.0).isOk());
  EXPECT_EQ(bf16ToFloat(b[0]), 24.0f);
  EXPECT_EQ(hostScale(i.data(), out.data(), 1, DataType::I32, std::numeric_limits<double>::infinity()).code(),
            StatusCode::InvalidArgument);
}

TEST(ExecutorBlocks, SplitAndContiguity) {
  std::vector<Box> blocks;
  ASSERT_TRUE(splitBlocks({4, 6}, 1, 3, blocks).isOk());
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[2], makeBox({0, 4}, {4, 2}));
  EXPECT_FALSE(blocksContiguous({4, 6}, 1));
  EXPECT_TRUE(blocksContiguous({1, 6}, 1));
  EXPECT_TRUE(blocksContiguous({4, 6}, 0));
  EXPECT_EQ(splitBlocks({4, 6}, 1, 4, blocks).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(splitBlocks({4, 6}, 2, 2, blocks).code(), StatusCode::InvalidArgument);
  std::size_t offset = 0;
  bool contiguous = false;
  ASSERT_TRUE(contiguousOffset({4, 6}, makeBox({2, 0}, {2, 6}), 4, offset, contiguous).isOk());
  EXPECT_TRUE(contiguous);
  EXPECT_EQ(offset, 48u);
  ASSERT_TRUE(contiguousOffset({4, 6}, makeBox({0, 3}, {2, 3}), 4, offset, contiguous).isOk());
  EXPECT_FALSE(contiguous);
}

}  // namespace
}  // namespace chimera::detail
