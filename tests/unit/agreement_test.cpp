// SPDX-License-Identifier: Apache-2.0
// The backend-neutral agreement (common/agreement.hpp) over a simulated group: every member's
// words are collected, then each member's MIN is the element-wise minimum over all of them,
// as an allReduce would compute it. Checks the verdicts every member reaches.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/agreement.hpp"

namespace chimera {
namespace {

// A group whose reduction is played in two passes: `collect` records what each member passes,
// `reduce` then gives each member the minimum over everything recorded.
class SimulatedGroup {
 public:
  detail::GroupMin collect() {
    return [this](std::span<std::int64_t> words) {
      inputs_.emplace_back(words.begin(), words.end());
      return Status::ok();
    };
  }
  detail::GroupMin reduce() {
    return [this](std::span<std::int64_t> words) {
      for (const std::vector<std::int64_t>& other : inputs_) {
        if (other.size() != words.size()) return Status::internal("members passed different word counts");
        for (std::size_t i = 0; i < words.size(); ++i) words[i] = std::min(words[i], other[i]);
      }
      return Status::ok();
    };
  }

 private:
  std::vector<std::vector<std::int64_t>> inputs_;
};

struct Member {
  detail::CallSignature signature;
  Status local;
};

// Every member's verdict on its call.
std::vector<Status> agreeOnCalls(const std::vector<Member>& members) {
  SimulatedGroup group;
  for (std::size_t r = 0; r < members.size(); ++r) {
    (void)detail::agreeOnCall(members[r].signature, members[r].local, static_cast<int>(r), "tp", group.collect());
  }
  std::vector<Status> verdicts;
  for (std::size_t r = 0; r < members.size(); ++r) {
    verdicts.push_back(
        detail::agreeOnCall(members[r].signature, members[r].local, static_cast<int>(r), "tp", group.reduce()));
  }
  return verdicts;
}

const detail::CallSignature kBase{OpKind::AllReduce, 4, DataType::F32, ReduceOp::Sum, 0};

TEST(CallAgreement, EqualCallsAgree) {
  for (const Status& verdict : agreeOnCalls({{kBase, Status::ok()}, {kBase, Status::ok()}, {kBase, Status::ok()}})) {
    EXPECT_TRUE(verdict.isOk()) << verdict.toString();
  }
}

TEST(CallAgreement, MismatchNamesTheRankTheGroupAndEveryDifferingField) {
  detail::CallSignature other = kBase;
  other.count = 8;
  other.dtype = DataType::BF16;
  const std::vector<Status> verdicts = agreeOnCalls({{kBase, Status::ok()}, {other, Status::ok()}});
  for (std::size_t r = 0; r < verdicts.size(); ++r) {
    EXPECT_EQ(verdicts[r].code(), StatusCode::Mismatch);
    EXPECT_EQ(verdicts[r].message(),
              "rank " + std::to_string(r) +
                  ": members of group tp disagree on the arguments of allReduce: count differs (min 4, max 8), dtype "
                  "differs (min float, max bfloat16)");
  }
}

TEST(CallAgreement, DifferentCollectivesAreNamedByTheirCalls) {
  detail::CallSignature other = kBase;
  other.kind = OpKind::Broadcast;
  other.root = 1;
  const std::vector<Status> verdicts = agreeOnCalls({{kBase, Status::ok()}, {other, Status::ok()}});
  for (const Status& verdict : verdicts) {
    EXPECT_EQ(verdict.code(), StatusCode::Mismatch);
    EXPECT_NE(verdict.message().find("collective differs (min allReduce, max broadcast)"), std::string::npos)
        << verdict.message();
    EXPECT_NE(verdict.message().find("root differs (min 0, max 1)"), std::string::npos) << verdict.message();
  }
}

TEST(CallAgreement, ALocalErrorStaysLocalAndTheOthersLearnOfIt) {
  const Status bad = Status::invalidArgument("send buffer is null but count is 4");
  const std::vector<Status> verdicts = agreeOnCalls({{kBase, Status::ok()}, {kBase, bad}, {kBase, Status::ok()}});
  EXPECT_EQ(verdicts[1].message(), bad.message());
  for (std::size_t r : {0u, 2u}) {
    EXPECT_EQ(verdicts[r].code(), StatusCode::Mismatch);
    EXPECT_EQ(verdicts[r].message(), "rank " + std::to_string(r) +
                                         ": rank 1 of group tp refused the call (allReduce): its own arguments are "
                                         "invalid (InvalidArgument there); no member ran it");
  }
}

// A refusal (Backend::refuseCollective passes no signature) is the verdict whatever the fields
// say, and the lowest refusing rank is named.
TEST(CallAgreement, TheLowestRefusingRankIsNamedWhateverTheFields) {
  const Status bad = Status::invalidArgument("root 9 is not a rank");
  const std::vector<Status> verdicts =
      agreeOnCalls({{kBase, Status::ok()}, {kBase, Status::ok()}, {detail::CallSignature{}, bad}, {kBase, bad}});
  EXPECT_EQ(verdicts[2].message(), bad.message());
  EXPECT_EQ(verdicts[3].message(), bad.message());
  for (std::size_t r : {0u, 1u}) {
    EXPECT_EQ(verdicts[r].code(), StatusCode::Mismatch);
    EXPECT_NE(verdicts[r].message().find(": rank 2 of group tp refused the call (allReduce)"), std::string::npos)
        << verdicts[r].message();
  }
}

TEST(CallAgreement, TheReductionsErrorIsReturned) {
  const detail::GroupMin failing = [](std::span<std::int64_t>) { return Status::timeout("rank 3 did not join"); };
  const Status verdict = detail::agreeOnCall(kBase, Status::ok(), 0, "tp", failing);
  EXPECT_EQ(verdict.code(), StatusCode::Timeout);
  EXPECT_EQ(verdict.message(), "rank 3 did not join");
}

TEST(SignatureAgreement, HashesFailuresAndFlagsOverTheGroup) {
  struct In {
    std::int64_t hash;
    bool failed;
    std::vector<std::uint8_t> flags;
  };
  const std::vector<In> members = {{-5, false, {0, 1, 0}}, {7, false, {0, 0, 0}}, {-5, true, {1, 0, 0}}};
  SimulatedGroup group;
  detail::SignatureVerdict verdict;
  for (std::size_t r = 0; r < members.size(); ++r) {
    const In& m = members[r];
    ASSERT_TRUE(
        detail::agreeOnSignature(m.hash, m.failed, static_cast<int>(r), m.flags, group.collect(), verdict).isOk());
  }
  for (std::size_t r = 0; r < members.size(); ++r) {
    const In& m = members[r];
    ASSERT_TRUE(
        detail::agreeOnSignature(m.hash, m.failed, static_cast<int>(r), m.flags, group.reduce(), verdict).isOk());
    EXPECT_EQ(verdict.lowHash, -5);
    EXPECT_EQ(verdict.highHash, 7);
    EXPECT_FALSE(verdict.sameHash());
    EXPECT_TRUE(verdict.anyFailed);
    EXPECT_EQ(verdict.failedRank, 2);
    EXPECT_EQ(verdict.flags, (std::vector<std::uint8_t>{1, 1, 0}));
  }
}

TEST(SignatureAgreement, EqualHashesWithoutFailures) {
  SimulatedGroup group;
  detail::SignatureVerdict verdict;
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(detail::agreeOnSignature(42, false, 0, {}, group.collect(), verdict).isOk());
  ASSERT_TRUE(detail::agreeOnSignature(42, false, 0, {}, group.reduce(), verdict).isOk());
  EXPECT_TRUE(verdict.sameHash());
  EXPECT_EQ(verdict.lowHash, 42);
  EXPECT_FALSE(verdict.anyFailed);
  EXPECT_EQ(verdict.failedRank, -1);
  EXPECT_TRUE(verdict.flags.empty());
}

// The Executor's and the Session's reduction is a Backend::allReduce, which on a backend that
// checks arguments runs an agreement of its own inside: the outer one must survive it.
TEST(SignatureAgreement, SurvivesAnAgreementInsideItsReduction) {
  SimulatedGroup outer;
  detail::SignatureVerdict verdict;
  ASSERT_TRUE(detail::agreeOnSignature(9, false, 0, {}, outer.collect(), verdict).isOk());
  ASSERT_TRUE(detail::agreeOnSignature(3, true, 1, {}, outer.collect(), verdict).isOk());
  const detail::GroupMin outerMin = outer.reduce();
  const detail::GroupMin checkingMin = [&outerMin](std::span<std::int64_t> words) {
    SimulatedGroup inner;  // the backend's own argument check, with many more words
    const detail::CallSignature call{OpKind::AllReduce, static_cast<std::int64_t>(words.size()), DataType::I64,
                                     ReduceOp::Min, 0};
    if (Status s = detail::agreeOnCall(call, Status::ok(), 0, "world", inner.collect()); !s.isOk()) return s;
    if (Status s = detail::agreeOnCall(call, Status::ok(), 0, "world", inner.reduce()); !s.isOk()) return s;
    return outerMin(words);
  };
  ASSERT_TRUE(detail::agreeOnSignature(9, false, 0, {}, checkingMin, verdict).isOk());
  EXPECT_EQ(verdict.lowHash, 3);
  EXPECT_EQ(verdict.highHash, 9);
  EXPECT_TRUE(verdict.anyFailed);
  EXPECT_EQ(verdict.failedRank, 1);
}

TEST(WordRange, ExtremesOfEveryWordIncludingTheInt64Bounds) {
  SimulatedGroup group;
  detail::WordRange range;
  const std::vector<std::int64_t> a = {3, -(std::int64_t{1} << 62), 0};
  const std::vector<std::int64_t> b = {1, std::int64_t{1} << 62, 0};
  ASSERT_TRUE(detail::agreeOnRange(a, group.collect(), range).isOk());
  ASSERT_TRUE(detail::agreeOnRange(b, group.collect(), range).isOk());
  ASSERT_TRUE(detail::agreeOnRange(a, group.reduce(), range).isOk());
  EXPECT_EQ(range.low, (std::vector<std::int64_t>{1, -(std::int64_t{1} << 62), 0}));
  EXPECT_EQ(range.high, (std::vector<std::int64_t>{3, std::int64_t{1} << 62, 0}));
  EXPECT_FALSE(range.agreed(0));
  EXPECT_TRUE(range.agreed(2));
}

}  // namespace
}  // namespace chimera
