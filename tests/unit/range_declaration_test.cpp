// SPDX-License-Identifier: Apache-2.0
// Byte-range consume declarations: validation, the candidate layouts, which candidates hold a
// range, and the choice among the ones every rank can read.
#include "session/range_declaration.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "chimera/chain.hpp"

namespace chimera::detail {
namespace {

class RangeDeclaration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Mesh::parse("dp=2,tp=4", 8, mesh_).isOk());
    replicated_ = Layout::replicated(mesh_);
  }
  Layout parse(const char* text) const {
    Layout out;
    EXPECT_TRUE(Layout::parse(text, mesh_, out).isOk()) << text;
    return out;
  }
  std::size_t indexOf(const std::vector<Layout>& candidates, const char* text) const {
    const Layout wanted = parse(text);
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i] == wanted) return i;
    }
    ADD_FAILURE() << text << " is not a candidate";
    return 0;
  }
  Mesh mesh_;
  Layout replicated_;
  TensorSpec spec_{{16, 8}, DataType::F32};  // 512 bytes, rows of 32 bytes
};

TEST_F(RangeDeclaration, CheckNamesTheProblem) {
  EXPECT_TRUE(checkByteRange(replicated_, spec_, 0, {0, 512}).isOk());
  EXPECT_TRUE(checkByteRange(replicated_, spec_, 0, {512, 0}).isOk());
  const Status past = checkByteRange(replicated_, spec_, 0, {500, 16});
  EXPECT_EQ(past.code(), StatusCode::InvalidArgument);
  EXPECT_NE(past.message().find("runs past the 512 bytes"), std::string::npos) << past.message();
  const Status split = checkByteRange(replicated_, spec_, 0, {2, 4});
  EXPECT_NE(split.message().find("whole float elements"), std::string::npos) << split.message();
  const Layout stage = parse("dp=@1");
  const Status notHeld = checkByteRange(stage, spec_, 0, {0, 4});  // rank 0 is at dp=0
  EXPECT_NE(notHeld.message().find("does not hold"), std::string::npos) << notHeld.message();
  EXPECT_TRUE(checkByteRange(stage, spec_, 0, {0, 0}).isOk());
}

// The value first, then shardings of its R axes in every nesting order, each readable from it.
TEST_F(RangeDeclaration, CandidatesAreReadableAndDistinct) {
  const std::vector<Layout> candidates = rangeCandidates(replicated_, spec_);
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates.front(), replicated_);
  // dp and tp each R, S0 or S1; both on one dim in two orders: 3*3 + 2 = 11 layouts.
  EXPECT_EQ(candidates.size(), 11u);
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    EXPECT_TRUE(checkConsumable(replicated_, candidates[i], spec_).isOk()) << candidates[i].toString();
    for (std::size_t j = 0; j < i; ++j) EXPECT_FALSE(candidates[i] == candidates[j]) << candidates[i].toString();
  }
  indexOf(candidates, "dp+tp=S0");
  indexOf(candidates, "tp+dp=S0");
  // Partial and stage axes stay as they are; an uneven split is left out.
  const std::vector<Layout> partial = rangeCandidates(parse("dp=P"), TensorSpec{{16, 6}, DataType::F32});
  EXPECT_EQ(partial.size(), 2u);  // dp=P and dp=P,tp=S0 (6 columns do not split 4 ways)
  EXPECT_EQ(partial[1], parse("dp=P,tp=S0"));
}

// Rank 5 is dp=1, tp=1: tp=S0 gives it rows 4..7, dp=S0 rows 8..15, dp+tp=S0 rows 10..11.
TEST_F(RangeDeclaration, UncoveredFlagsFollowTheRankParts) {
  const std::vector<Layout> candidates = rangeCandidates(replicated_, spec_);
  std::vector<std::uint8_t> flags;
  appendUncovered(replicated_, spec_, 5, {10 * 32, 2 * 32}, candidates, flags);  // rows 10..11
  ASSERT_EQ(flags.size(), candidates.size());
  EXPECT_EQ(flags[0], 0);
  EXPECT_EQ(flags[indexOf(candidates, "dp+tp=S0")], 0);
  EXPECT_EQ(flags[indexOf(candidates, "dp=S0")], 0);
  EXPECT_EQ(flags[indexOf(candidates, "tp=S0")], 1);
  EXPECT_EQ(chooseRangeLayout(candidates, spec_, flags.data()), parse("dp+tp=S0"));
  // Elements 30..33 end row 3 and start row 4: columns 6..7 and 0..1 span the whole row, so
  // no column shard holds them, and row 3 lies in no row part of rank 5.
  flags.clear();
  appendUncovered(replicated_, spec_, 5, {30 * 4, 4 * 4}, candidates, flags);
  EXPECT_EQ(flags[indexOf(candidates, "tp=S1")], 1);
  EXPECT_EQ(flags[indexOf(candidates, "dp=S0")], 1);
  EXPECT_EQ(chooseRangeLayout(candidates, spec_, flags.data()), replicated_);
  // Columns 2..3 of row 7 lie in tp=S1's part of rank 5 (columns 2..3), in tp=S0's (rows
  // 4..7) and in tp+dp=S0's (rows 6..7), which is the smallest.
  flags.clear();
  appendUncovered(replicated_, spec_, 5, {(7 * 8 + 2) * 4, 2 * 4}, candidates, flags);
  EXPECT_EQ(flags[indexOf(candidates, "tp=S1")], 0);
  EXPECT_EQ(flags[indexOf(candidates, "tp=S0")], 0);
  EXPECT_EQ(flags[indexOf(candidates, "dp=S1,tp=S1")], 1);  // dp=1, tp=1: column 5
  EXPECT_EQ(flags[indexOf(candidates, "dp+tp=S0")], 1);     // rows 10..11
  EXPECT_EQ(chooseRangeLayout(candidates, spec_, flags.data()), parse("tp+dp=S0"));
  // An empty range is inside every part.
  flags.clear();
  appendUncovered(replicated_, spec_, 5, {0, 0}, candidates, flags);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), 1), 0);
}

// OR-ed over the ranks, the smallest candidate no rank flagged wins; ties go to the first.
TEST_F(RangeDeclaration, ChoiceTakesTheSmallestUnflagged) {
  const std::vector<Layout> candidates = rangeCandidates(replicated_, spec_);
  std::vector<std::uint8_t> any(candidates.size(), 0);
  for (int rank = 0; rank < 8; ++rank) {
    std::vector<std::uint8_t> flags;
    const std::size_t tp = static_cast<std::size_t>(rank % 4);
    appendUncovered(replicated_, spec_, rank, {tp * 4 * 32, 4 * 32}, candidates, flags);  // its tp rows
    for (std::size_t i = 0; i < flags.size(); ++i) any[i] |= flags[i];
  }
  EXPECT_EQ(chooseRangeLayout(candidates, spec_, any.data()), parse("tp=S0"));
}

}  // namespace
}  // namespace chimera::detail
