// SPDX-License-Identifier: Apache-2.0
// The point-to-point algorithms directly, with segment sizes the backend never picks
// (AllGather runs unsegmented there) and uneven block splits, on the world group; the ring
// ReduceScatter (the measured alternative) against the direct one the backend uses.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backend_test_support.hpp"
#include "mpi/exchange.hpp"
#include "mpi/fault_notice.hpp"
#include "mpi/ring.hpp"

namespace chimera::testing {
namespace {

// Segment sizes in bytes: one element, an odd number of f32 elements, larger than any block.
constexpr std::size_t kSegmentBytes[] = {4, 12, std::size_t{1} << 20};

TEST(MpiRing, SegmentedAllGatherRingAndDirectReduceScatterOnUnevenBlocks) {
  const int n = worldSize();
  const int me = worldRank();
  const Mesh mesh = Mesh::flat(n);
  MPI_Comm noticeComm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &noticeComm);
  detail::FaultNotices notices(noticeComm, me, n, /*announcing=*/true);
  detail::MpiGroupCache cache(MPI_COMM_WORLD, mesh, me, detail::kDefaultTimeoutMs, notices);
  const detail::MpiGroup* group = nullptr;
  const Status status = cache.get(mesh.allAxes(), group);
  FirstFailure failure;
  failure.record(status.isOk(), status.toString());
  detail::ScratchBuffer scratch;
  for (const std::size_t count : {std::size_t{3} * n + 2, std::size_t{41}}) {
    for (const std::size_t segment : kSegmentBytes) {
      if (!status.isOk()) break;
      const detail::BlockSplit split{count, n};
      // AllGather: every rank fills its own block, the ring fills the rest.
      std::vector<float> gathered(count, -1.0f);
      for (std::size_t i = 0; i < split.size(me); ++i)
        gathered[split.offset(me) + i] = static_cast<float>(patternValue(3, me, i, 100));
      const Status ag = detail::ringAllGather(gathered.data(), split, DataType::F32, *group, segment);
      failure.record(ag.isOk(), ag.toString());
      for (int r = 0; r < n && ag.isOk(); ++r)
        for (std::size_t i = 0; i < split.size(r); ++i)
          failure.record(gathered[split.offset(r) + i] == patternValue(3, r, i, 100),
                         fmt::format("ring allGather count {} segment {}: block {} element {}", count, segment, r, i));
      std::vector<float> directGathered(count, -1.0f);
      for (std::size_t i = 0; i < split.size(me); ++i)
        directGathered[split.offset(me) + i] = gathered[split.offset(me) + i];
      const Status dag = detail::directAllGather(directGathered.data(), split, DataType::F32, *group);
      failure.record(dag.isOk() && directGathered == gathered,
                     fmt::format("direct allGather count {}: {}", count, dag.toString()));
      // ReduceScatter of the same split: block `me` summed over ranks.
      std::vector<std::int64_t> input(count);
      for (std::size_t i = 0; i < count; ++i) input[i] = patternValue(4, me, i, 1000);
      std::vector<std::int64_t> mine(split.size(me) + 1, -1);
      const Status rs = detail::ringReduceScatter(input.data(), mine.data(), split, DataType::I64, ReduceOp::Sum,
                                                  *group, scratch, segment);
      failure.record(rs.isOk(), rs.toString());
      for (std::size_t i = 0; i < split.size(me) && rs.isOk(); ++i) {
        std::int64_t want = 0;
        for (int r = 0; r < n; ++r) want += patternValue(4, r, split.offset(me) + i, 1000);
        failure.record(mine[i] == want, fmt::format("ring reduceScatter count {} segment {}: element {} is {}, want {}",
                                                    count, segment, i, mine[i], want));
      }
      failure.record(mine[split.size(me)] == -1, "ring reduceScatter wrote past its block");
      // Direct ReduceScatter of the same split, in place in a copy of the input.
      std::vector<std::int64_t> inPlace = input;
      std::int64_t* own = inPlace.data() + split.offset(me);
      const Status direct = detail::directReduceScatter(inPlace.data(), own, split, DataType::I64, ReduceOp::Sum,
                                                        *group, scratch, segment);
      failure.record(direct.isOk(), direct.toString());
      for (std::size_t i = 0; i < split.size(me) && direct.isOk() && rs.isOk(); ++i)
        failure.record(own[i] == mine[i], fmt::format("direct reduceScatter count {} segment {}: element {} is {}, "
                                                      "ring gave {}",
                                                      count, segment, i, own[i], mine[i]));
    }
  }
  EXPECT_TRUE(allRanksAgree(failure.ok));
}

TEST(MpiRing, BlockSplitCoversCountWithSizesDifferingByOne) {
  for (const std::size_t count : {0, 1, 7, 8, 9, 1023}) {
    for (const int parts : {1, 2, 3, 8}) {
      const detail::BlockSplit split{count, parts};
      std::size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        EXPECT_EQ(split.offset(i), next) << count << "/" << parts << " block " << i;
        EXPECT_LE(split.size(i), split.size(0));
        EXPECT_GE(split.size(i) + 1, split.size(0));
        next += split.size(i);
      }
      EXPECT_EQ(next, count) << count << "/" << parts;
    }
  }
}

}  // namespace
}  // namespace chimera::testing
