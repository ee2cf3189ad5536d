// SPDX-License-Identifier: Apache-2.0
// The pack kernel's vector-width choice (kernels/copy_split.cuh), checked exhaustively on the
// CPU over every address pair modulo 32, every piece length up to 80 and every element size:
// the split covers the piece exactly, its vectors are aligned on both sides, and it always
// takes the widest width the two addresses allow.
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/copy_split.cuh"

namespace chimera {
namespace {

int widestCommonWidth(std::uint64_t src, std::uint64_t dst, int elementSize) {
  for (int width = 16; width >= 4 && width > elementSize; width /= 2) {
    if ((src % width) == (dst % width)) return width;
  }
  return elementSize;
}

TEST(CopySplit, CoversThePieceWithAlignedVectorsOfTheWidestWidth) {
  for (int elementSize : {1, 2, 4, 8}) {
    for (std::uint64_t src = 4096; src < 4096 + 32; src += static_cast<std::uint64_t>(elementSize)) {
      for (std::uint64_t dst = 8192; dst < 8192 + 32; dst += static_cast<std::uint64_t>(elementSize)) {
        for (std::int64_t n = 0; n <= 80; ++n) {
          const CopySplit split = copySplit(src, dst, n, elementSize);
          const int want = widestCommonWidth(src, dst, elementSize);
          ASSERT_EQ(split.width, want) << src << " " << dst << " " << n << " " << elementSize;
          const std::int64_t perVector = split.width / elementSize;
          ASSERT_EQ(split.head + split.vectors * perVector + split.tail, n);
          ASSERT_GE(split.head, 0);
          ASSERT_GE(split.tail, 0);
          if (split.width == elementSize) {
            ASSERT_EQ(split.vectors, 0);
            continue;
          }
          ASSERT_LT(split.tail, perVector) << "a whole vector left in the tail";
          ASSERT_LT(split.head, perVector) << "the head is only the way to the boundary";
          const std::uint64_t firstSrc = src + static_cast<std::uint64_t>(split.head * elementSize);
          const std::uint64_t firstDst = dst + static_cast<std::uint64_t>(split.head * elementSize);
          if (split.vectors > 0) {
            ASSERT_EQ(firstSrc % static_cast<std::uint64_t>(split.width), 0u);
            ASSERT_EQ(firstDst % static_cast<std::uint64_t>(split.width), 0u);
          }
        }
      }
    }
  }
}

TEST(CopySplit, MisalignedBf16BoxesStillMoveInVectors) {
  // A bf16 box whose tensor-side run starts 4 bytes past a 16-byte boundary, packed to a
  // 256-byte-aligned staging offset: 4-byte vectors after none of head.
  const CopySplit a = copySplit(0x1004, 0x2000, 1024, 2);
  EXPECT_EQ(a.width, 4);
  EXPECT_EQ(a.head, 0);
  EXPECT_EQ(a.vectors, 512);
  // 8 bytes past: 8-byte vectors.
  EXPECT_EQ(copySplit(0x1008, 0x2000, 1024, 2).width, 8);
  // 2 bytes past: no vector width fits, element by element.
  const CopySplit odd = copySplit(0x1002, 0x2000, 1024, 2);
  EXPECT_EQ(odd.width, 2);
  EXPECT_EQ(odd.head, 1024);
}

}  // namespace
}  // namespace chimera
