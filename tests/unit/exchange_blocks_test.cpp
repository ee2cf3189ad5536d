// SPDX-License-Identifier: Apache-2.0
// The words of the routed exchange's rounds (src/routed/exchange_blocks.hpp): a failed member's
// word names the rank at fault, its own or the one a replica told it, and the verdict names the
// lowest of them.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "routed/exchange_blocks.hpp"

namespace chimera {
namespace {

constexpr std::uint32_t kTag = 0x2a;

TEST(ExchangeBlocks, CountWordsCarryTheCountOrTheRankAtFault) {
  EXPECT_GE(detail::countWord(5, kTag, false), 0);
  EXPECT_EQ(detail::countWord(5, kTag, true), detail::kCountError);
  EXPECT_EQ(detail::countWord(5, kTag, true, -1), detail::kCountError);
  EXPECT_LT(detail::countWord(5, kTag, true, 0), detail::kCountError);  // rank 0 is a rank, not "none"
  EXPECT_NE(detail::countWord(5, kTag, true, 0), detail::countWord(5, kTag, true, 1));
  EXPECT_GE(detail::countWord(5, kTag, false, 7), 0);  // a rank at fault matters only when failed
}

TEST(ExchangeBlocks, CountVerdictNamesTheLowestRankAtFault) {
  const std::vector<int> ranks = {0, 3, 5, 6};
  std::vector<std::size_t> counts;
  // Rank 5 failed through rank 2 (a replica of its tokens), rank 6 by its own check: rank 2.
  const std::vector<std::int32_t> words = {detail::countWord(1, kTag, false), detail::countWord(2, kTag, false),
                                           detail::countWord(0, kTag, true, 2), detail::countWord(0, kTag, true)};
  const Status st = detail::countVerdict(words, ranks, kTag, Status::ok(), counts);
  EXPECT_EQ(st.code(), StatusCode::Mismatch) << st.toString();
  EXPECT_NE(st.message().find("rank 2 reported an error"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("passed on by rank 5"), std::string::npos) << st.message();
  // Its own failure names the member itself, the lowest one first.
  const std::vector<std::int32_t> own = {detail::countWord(1, kTag, false), detail::countWord(0, kTag, true),
                                         detail::countWord(0, kTag, true, 4), detail::countWord(1, kTag, false)};
  const Status first = detail::countVerdict(own, ranks, kTag, Status::ok(), counts);
  EXPECT_NE(first.message().find("rank 3 reported an error"), std::string::npos) << first.message();
  EXPECT_EQ(first.message().find("passed on"), std::string::npos) << first.message();
  // No failure: the counts.
  const std::vector<std::int32_t> good = {detail::countWord(1, kTag, false), detail::countWord(2, kTag, false),
                                          detail::countWord(3, kTag, false), detail::countWord(4, kTag, false)};
  ASSERT_TRUE(detail::countVerdict(good, ranks, kTag, Status::ok(), counts).isOk());
  EXPECT_EQ(counts, (std::vector<std::size_t>{1, 2, 3, 4}));
}

TEST(ExchangeBlocks, BlockVerdictNamesTheRankAWordNames) {
  const std::vector<int> ranks = {1, 4};
  const std::vector<std::int32_t> words = {detail::countWord(0, kTag, false), detail::countWord(0, kTag, true, 7)};
  const Status st = detail::blockVerdict(words, ranks, {}, kTag, Status::ok(), "routed dispatch");
  EXPECT_EQ(st.code(), StatusCode::Mismatch);
  EXPECT_NE(st.message().find("rank 7 reported an error in this exchange"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("passed on by rank 4"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace chimera
