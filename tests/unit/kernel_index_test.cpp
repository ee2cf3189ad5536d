// SPDX-License-Identifier: Apache-2.0
// The host+device box index math (src/box/box_index.hpp) and the host pack path built on
// it, checked against a brute-force walk of the box that shares none of its arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "box/box_index.hpp"
#include "box/box_pack.hpp"

namespace chimera {
namespace {

TensorBox makeBox(std::vector<std::int64_t> dims, std::vector<std::int64_t> offset, std::vector<std::int64_t> extent) {
  TensorBox box;
  box.ndims = static_cast<int>(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    box.dims[d] = dims[d];
    box.offset[d] = offset[d];
    box.extent[d] = extent[d];
  }
  return box;
}

// Tensor offsets of the box's elements in row-major box order, by an odometer over the
// box coordinates (no merging, no division).
std::vector<std::int64_t> bruteForceOffsets(const TensorBox& box) {
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> coord(static_cast<std::size_t>(box.ndims), 0);
  while (true) {
    std::int64_t offset = 0;
    for (int d = 0; d < box.ndims; ++d)
      offset = offset * box.dims[d] + box.offset[d] + coord[static_cast<std::size_t>(d)];
    offsets.push_back(offset);
    int d = box.ndims - 1;
    while (d >= 0 && ++coord[static_cast<std::size_t>(d)] == box.extent[d]) coord[static_cast<std::size_t>(d--)] = 0;
    if (d < 0) return offsets;
  }
}

TensorBox randomBox(std::mt19937& rng) {
  TensorBox box;
  box.ndims = std::uniform_int_distribution<int>(1, 5)(rng);
  for (int d = 0; d < box.ndims; ++d) {
    box.dims[d] = std::uniform_int_distribution<std::int64_t>(1, 7)(rng);
    // Favour full and single-index extents: they are the cases that merge.
    const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
    if (kind == 0) {
      box.offset[d] = 0;
      box.extent[d] = box.dims[d];
    } else {
      box.offset[d] = std::uniform_int_distribution<std::int64_t>(0, box.dims[d] - 1)(rng);
      box.extent[d] = kind == 1 ? 1 : std::uniform_int_distribution<std::int64_t>(1, box.dims[d] - box.offset[d])(rng);
    }
  }
  return box;
}

TEST(BoxIndex, MergesFullyCoveredInnerDimensionsIntoOneRun) {
  const BoxRuns slab = boxRuns(makeBox({4, 6, 8}, {1, 0, 0}, {2, 6, 8}));
  EXPECT_EQ(slab.ndims, 1);
  EXPECT_EQ(slab.runLength, 96);
  EXPECT_EQ(slab.numRuns, 1);
  EXPECT_EQ(slab.base, 48);

  const BoxRuns rows = boxRuns(makeBox({4, 6, 8}, {1, 2, 0}, {2, 3, 8}));
  EXPECT_EQ(rows.ndims, 2);
  EXPECT_EQ(rows.runLength, 24);
  EXPECT_EQ(rows.numRuns, 2);
  EXPECT_EQ(rows.base, 1 * 48 + 2 * 8);
  EXPECT_EQ(runOffset(rows, 1), 2 * 48 + 2 * 8);
}

TEST(BoxIndex, MergesSingleIndexOuterDimensions) {
  const BoxRuns runs = boxRuns(makeBox({4, 6, 8}, {1, 2, 3}, {1, 1, 5}));
  EXPECT_EQ(runs.ndims, 1);
  EXPECT_EQ(runs.runLength, 5);
  EXPECT_EQ(runs.numRuns, 1);
  EXPECT_EQ(runs.base, 1 * 48 + 2 * 8 + 3);
}

TEST(BoxIndex, ColumnBlockHasOneRunPerRow) {
  // A tensor-parallel shard of the last dimension: 3 rows of 4 out of 16 columns.
  const BoxRuns runs = boxRuns(makeBox({3, 16}, {0, 8}, {3, 4}));
  EXPECT_EQ(runs.runLength, 4);
  EXPECT_EQ(runs.numRuns, 3);
  EXPECT_EQ(elementOffset(runs, 0), 8);
  EXPECT_EQ(elementOffset(runs, 5), 16 + 8 + 1);
  EXPECT_EQ(elementOffset(runs, 11), 32 + 11);
}

TEST(BoxIndex, RandomBoxesMatchBruteForceAndRunsAreMaximal) {
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 2000; ++trial) {
    const TensorBox box = randomBox(rng);
    ASSERT_EQ(boxError(box), nullptr);
    const std::vector<std::int64_t> expected = bruteForceOffsets(box);
    ASSERT_EQ(boxVolume(box), static_cast<std::int64_t>(expected.size()));
    const BoxRuns runs = boxRuns(box);
    ASSERT_EQ(runs.numRuns * runs.runLength, boxVolume(box));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(elementOffset(runs, static_cast<std::int64_t>(i)), expected[i])
          << "trial " << trial << " element " << i << " box " << detail::describeBox(box);
    }
    // Maximal: no run ends where the next one starts (else they should have merged).
    for (std::int64_t r = 0; r + 1 < runs.numRuns; ++r) {
      ASSERT_NE(runOffset(runs, r) + runs.runLength, runOffset(runs, r + 1)) << detail::describeBox(box);
    }
  }
}

TEST(BoxIndex, LargeTensorsUse64BitOffsets) {
  // 2^20 x 2^14 elements: offsets beyond 2^32.
  const BoxRuns runs = boxRuns(makeBox({1 << 20, 1 << 14}, {(1 << 20) - 2, 100}, {2, 10}));
  EXPECT_EQ(runOffset(runs, 1), (std::int64_t{1} << 34) - (std::int64_t{1} << 14) + 100);
  EXPECT_GT(runOffset(runs, 1), std::int64_t{1} << 32);
}

TEST(BoxIndex, InvalidBoxesAreNamed) {
  EXPECT_NE(boxError(makeBox({}, {}, {})), nullptr);
  TensorBox tooMany;
  tooMany.ndims = kMaxBoxDims + 1;
  EXPECT_NE(boxError(tooMany), nullptr);
  EXPECT_STREQ(boxError(makeBox({4, 0}, {0, 0}, {1, 1})), "tensor extent must be >= 1");
  EXPECT_STREQ(boxError(makeBox({4, 4}, {0, 0}, {1, 0})), "box extent must be >= 1");
  EXPECT_STREQ(boxError(makeBox({4, 4}, {-1, 0}, {1, 1})), "box offset must be >= 0");
  EXPECT_STREQ(boxError(makeBox({8, 8}, {0, 6}, {2, 4})), "box offset + extent exceeds the tensor extent");
  EXPECT_STREQ(boxError(makeBox({1LL << 40, 1LL << 40}, {0, 0}, {1, 1})), "tensor element count overflows int64");
  EXPECT_EQ(boxError(makeBox({8, 8}, {0, 4}, {8, 4})), nullptr);

  const Status status = detail::validateBox(makeBox({8, 8}, {0, 6}, {2, 4}));
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("[2x4] at [0,6] of [8x8]"), std::string::npos) << status.message();
}

// Byte pattern of element e of a tensor: distinct per element for any element size.
std::vector<std::uint8_t> patternTensor(std::int64_t elements, std::size_t elementSize) {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(elements) * elementSize);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>((i * 131 + i / 256) & 0xff);
  return bytes;
}

TEST(BoxPackHost, PackAndUnpackMatchBruteForceForEveryElementSize) {
  std::mt19937 rng(7);
  for (std::size_t elementSize : {1u, 2u, 3u, 4u, 8u, 16u}) {
    for (int trial = 0; trial < 200; ++trial) {
      const TensorBox box = randomBox(rng);
      const std::vector<std::uint8_t> tensor = patternTensor(tensorVolume(box), elementSize);
      const std::vector<std::int64_t> offsets = bruteForceOffsets(box);
      // Misaligned bases: one spare leading byte on both sides.
      std::vector<std::uint8_t> source(tensor.size() + 1);
      std::memcpy(source.data() + 1, tensor.data(), tensor.size());
      std::vector<std::uint8_t> packed(offsets.size() * elementSize + 1, 0);
      ASSERT_TRUE(detail::packBoxHost(source.data() + 1, packed.data() + 1, box, elementSize).isOk());
      for (std::size_t i = 0; i < offsets.size(); ++i) {
        ASSERT_EQ(std::memcmp(packed.data() + 1 + i * elementSize,
                              tensor.data() + static_cast<std::size_t>(offsets[i]) * elementSize, elementSize),
                  0)
            << "element size " << elementSize << " element " << i << " box " << detail::describeBox(box);
      }
      // Unpack into a tensor of 0xEE: the box gets the packed bytes back, the rest is untouched.
      std::vector<std::uint8_t> target(tensor.size() + 1, 0xEE);
      ASSERT_TRUE(detail::unpackBoxHost(packed.data() + 1, target.data() + 1, box, elementSize).isOk());
      std::vector<std::uint8_t> expected(tensor.size(), 0xEE);
      for (std::int64_t offset : offsets) {
        const std::size_t byte = static_cast<std::size_t>(offset) * elementSize;
        std::memcpy(expected.data() + byte, tensor.data() + byte, elementSize);
      }
      ASSERT_EQ(std::vector<std::uint8_t>(target.begin() + 1, target.end()), expected) << detail::describeBox(box);
    }
  }
}

TEST(BoxPackHost, BadArgumentsAreRejected) {
  std::vector<float> tensor(64);
  std::vector<float> packed(64);
  const TensorBox good = makeBox({8, 8}, {0, 4}, {8, 4});
  EXPECT_EQ(detail::packBoxHost(nullptr, packed.data(), good, 4).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(detail::unpackBoxHost(packed.data(), nullptr, good, 4).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(detail::packBoxHost(tensor.data(), packed.data(), good, 0).code(), StatusCode::InvalidArgument);
  const Status bad = detail::packBoxHost(tensor.data(), packed.data(), makeBox({8, 8}, {0, 6}, {2, 4}), 4);
  EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.message().find("exceeds"), std::string::npos);
}

}  // namespace
}  // namespace chimera
