// SPDX-License-Identifier: Apache-2.0
// Session: consume declarations given as byte ranges of a rank's buffer. The ranks agree on
// the smallest layout holding every rank's range; the range must hold the recorded result.
#include <gtest/gtest.h>

#include "session_test_support.hpp"

namespace chimera::testing {
namespace {

// tp=8, a 16x8 f32 AllReduce of partial sums: rank r holds (i % 7) + r at element i, so the
// sum is 8 * (i % 7) + 28 everywhere. Each rank owns 2 rows = 16 elements = 64 bytes.
class SessionRange : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 16;
  static constexpr std::int64_t kCols = 8;
  static constexpr std::size_t kRowBytes = kCols * 4;
  static constexpr std::size_t kShardBytes = 2 * kRowBytes;
  void SetUp() override {
    ASSERT_TRUE(Mesh::parse("tp=8", worldSize(), mesh_).isOk());
    ASSERT_TRUE(createMpiBackend(mesh_, backend_).isOk());
    ASSERT_TRUE(Layout::parse("tp=P", mesh_, partial_).isOk());
  }
  std::unique_ptr<Session> makeSession(bool fusion) {
    SessionOptions options;
    options.fusion = fusion;
    std::unique_ptr<Session> session;
    EXPECT_TRUE(Session::create(*backend_, options, session).isOk());
    return session;
  }
  // Records the AllReduce on fresh partial sums and consumes [offset, +bytes) on this rank.
  Status step(Session& session, std::size_t offset, std::size_t bytes) {
    for (std::size_t i = 0; i < buffer_.size(); ++i) buffer_[i] = static_cast<float>(i % 7) + worldRank();
    TensorHandle x, y;
    CHIMERA_RETURN_IF_ERROR(session.tensor(buffer_.data(), buffer_.size() * 4, spec_, partial_, x));
    CHIMERA_RETURN_IF_ERROR(session.allReduce(x, mesh_.allAxes(), y));
    return session.consume(y, offset, bytes);
  }
  // The declared bytes hold the full sum.
  bool rangeIsFullSum(std::size_t offset, std::size_t bytes) const {
    for (std::size_t i = offset / 4; i < (offset + bytes) / 4; ++i) {
      if (buffer_[i] != static_cast<float>(8 * (i % 7) + 28)) return false;
    }
    return true;
  }
  std::size_t ownRows() const { return static_cast<std::size_t>(worldRank()) * kShardBytes; }
  Mesh mesh_;
  std::unique_ptr<Backend> backend_;
  Layout partial_;
  TensorSpec spec_{{kRows, kCols}, DataType::F32};
  std::vector<float> buffer_ = std::vector<float>(kRows * kCols);
};

// Every rank reads its own rows: that is tp=S0, so the AllReduce runs as a ReduceScatter.
TEST_F(SessionRange, OwnRowsFuseToAReduceScatter) {
  auto fused = makeSession(true);
  const Status status = step(*fused, ownRows(), kShardBytes);
  EXPECT_TRUE(status.isOk()) << status.toString();
  const SessionStats stats = fused->stats();
  EXPECT_EQ(stats.fusedChains, 1u);
  EXPECT_LT(stats.bytesSent, stats.bytesAsRecorded);
  EXPECT_TRUE(allRanksAgree(status.isOk() && rangeIsFullSum(ownRows(), kShardBytes)));
}

// Part of a row inside the rank's own rows resolves to the same layout.
TEST_F(SessionRange, PartOfTheOwnRowsIsEnough) {
  auto fused = makeSession(true);
  const std::size_t offset = ownRows() + kRowBytes + 8;
  const Status status = step(*fused, offset, 12);
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(fused->stats().fusedChains, 1u);
  EXPECT_TRUE(allRanksAgree(status.isOk() && rangeIsFullSum(offset, 12)));
}

// A range reaching into the next rank's rows fits no shard: the full result is written, and
// a rank that reads nothing does not change that.
TEST_F(SessionRange, RangeAcrossShardsRunsAsRecorded) {
  auto fused = makeSession(true);
  const bool last = worldRank() == worldSize() - 1;
  const std::size_t offset = last ? 0 : ownRows() + kRowBytes;
  const std::size_t bytes = last ? 0 : kShardBytes;
  const Status status = step(*fused, offset, bytes);
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(fused->stats().bytesSent, fused->stats().bytesAsRecorded);
  bool whole = true;  // every element, not only the range: the AllReduce's own result
  for (std::size_t i = 0; i < buffer_.size(); ++i) whole = whole && buffer_[i] == static_cast<float>(8 * (i % 7) + 28);
  EXPECT_TRUE(allRanksAgree(status.isOk() && rangeIsFullSum(offset, bytes) && whole));
}

// Ranks declaring different ranges agree on one layout: rank 0 reads nothing, the others
// their own rows, so the window still fuses, and gives the same range as fusion off.
TEST_F(SessionRange, RanksMayDeclareDifferentRanges) {
  const std::size_t bytes = worldRank() == 0 ? 0 : kShardBytes;
  auto off = makeSession(false);
  ASSERT_TRUE(step(*off, ownRows(), bytes).isOk());
  const std::vector<float> unfused = buffer_;
  auto fused = makeSession(true);
  const Status status = step(*fused, ownRows(), bytes);
  EXPECT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(fused->stats().fusedChains, 1u);
  bool same = status.isOk();
  for (std::size_t i = ownRows() / 4; i < (ownRows() + bytes) / 4; ++i) same = same && buffer_[i] == unfused[i];
  EXPECT_TRUE(allRanksAgree(same));
}

// The second step with the same ranges is a cache hit; another range is a miss on every rank.
TEST_F(SessionRange, RepeatedRangesHitTheCache) {
  auto fused = makeSession(true);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(step(*fused, ownRows(), kShardBytes).isOk());
  ASSERT_TRUE(step(*fused, 0, buffer_.size() * 4).isOk());
  const SessionStats stats = fused->stats();
  EXPECT_EQ(stats.windows, 4u);
  EXPECT_EQ(stats.windowCacheHits, 2u);
  EXPECT_EQ(stats.fusedChains, 3u);
  EXPECT_TRUE(allRanksAgree(rangeIsFullSum(0, buffer_.size() * 4)));
}

// A range past the buffer or splitting an element is InvalidArgument on the rank that gave it;
// the other ranks get Mismatch from the same window, not a hang.
TEST_F(SessionRange, BadRangeOnOneRankFailsEveryRank) {
  auto fused = makeSession(true);
  const bool bad = worldRank() == 2;
  const Status status = step(*fused, bad ? buffer_.size() * 4 - 8 : ownRows(), bad ? 16 : kShardBytes);
  const StatusCode expected = bad ? StatusCode::InvalidArgument : StatusCode::Mismatch;
  EXPECT_EQ(status.code(), expected) << status.toString();
  if (bad) {
    EXPECT_NE(status.message().find("runs past"), std::string::npos) << status.message();
  }
  EXPECT_TRUE(allRanksAgree(status.code() == expected));
  const Status split = step(*fused, 2, 4);  // every rank: half elements
  EXPECT_EQ(split.code(), StatusCode::InvalidArgument) << split.toString();
  EXPECT_NE(split.message().find("whole float elements"), std::string::npos) << split.message();
  EXPECT_TRUE(step(*fused, ownRows(), kShardBytes).isOk());  // still usable
}

}  // namespace
}  // namespace chimera::testing
