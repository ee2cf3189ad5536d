// SPDX-License-Identifier: Apache-2.0
// Bad input to the MPI backend: every rank gets a Status naming the problem, none hangs,
// and the backend still works afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend_test_support.hpp"

namespace chimera::testing {
namespace {

bool has(const Status& status, StatusCode code, const std::string& needle) {
  return status.code() == code && status.message().find(needle) != std::string::npos;
}

BackendUnderTest checkedBackend() {
  const auto cases = groupCases(worldSize());
  return makeBackend(cases.front(), testOptions(detail::MpiAlgorithm::Auto));
}

// A correct AllReduce over `axes` after an error proves nobody is left inside a collective.
bool stillWorks(BackendUnderTest& t, AxisSet axes) {
  std::vector<int> data(33, 1);
  const Status status = t.backend->allReduce(data.data(), data.data(), data.size(), DataType::I32, ReduceOp::Sum, axes);
  const int want = t.mesh.groupSize(axes);
  bool ok = status.isOk();
  for (const int v : data) ok = ok && v == want;
  EXPECT_TRUE(ok) << status.toString();
  return ok;
}

bool stillWorks(BackendUnderTest& t) { return stillWorks(t, t.axes); }

TEST(MpiBackendBadInput, UnknownAndEmptyAxes) {
  BackendUnderTest t = checkedBackend();
  bool ok = t.status.isOk();
  AxisSet axes;
  const Status unknown = t.mesh.parseAxes("ep", axes);
  EXPECT_TRUE(has(unknown, StatusCode::InvalidArgument, "'ep'")) << unknown.toString();
  ok = ok && has(unknown, StatusCode::InvalidArgument, "'ep'");
  std::vector<float> data(4, 1.0f);
  const Status empty = t.backend->allReduce(data.data(), data.data(), 4, DataType::F32, ReduceOp::Sum, AxisSet{});
  EXPECT_TRUE(has(empty, StatusCode::InvalidArgument, "empty axis set")) << empty.toString();
  ok = ok && has(empty, StatusCode::InvalidArgument, "empty axis set");
  const Status outside = t.backend->allGather(data.data(), data.data(), 1, DataType::F32, AxisSet::fromBits(1u << 7));
  EXPECT_TRUE(has(outside, StatusCode::InvalidArgument, "does not have")) << outside.toString();
  ok = ok && has(outside, StatusCode::InvalidArgument, "does not have");
  EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
}

// Axes naming no group on rank 0 alone: rank 0 cannot know the group its peers wait in, so it
// announces the failure (a fault notice); the peers' agreement round asks it to stand in, so
// every peer's call fails with Mismatch naming it instead of waiting for the timeout, and the
// group's next call works. Twice: while the peers create the group's communicator (a round over
// the world), then in the group's own argument agreement.
TEST(MpiBackendBadInput, AxesNamingNoGroupOnOneRankFailEveryRankAtOnceAndTheNextCallWorks) {
  if (worldSize() < 2) GTEST_SKIP() << "needs a peer";
  BackendUnderTest t = checkedBackend();
  ASSERT_TRUE(allRanksAgree(t.status.isOk())) << t.status.toString();
  const bool culprit = worldRank() == 0;
  const AxisSet world = t.mesh.allAxes();
  bool ok = true;
  for (const char* where : {"creating the group", "in the group's agreement"}) {
    SCOPED_TRACE(where);
    std::vector<float> data(16, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    const Status status = t.backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum,
                                               culprit ? AxisSet::fromBits(1u << 7) : world);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    const bool failed = culprit ? has(status, StatusCode::InvalidArgument, "does not have")
                                : has(status, StatusCode::Mismatch,
                                      "rank 0 failed this call before it knew the call's group and stood in for it") &&
                                      has(status, StatusCode::Mismatch, "does not have");
    EXPECT_TRUE(failed) << status.toString();
    EXPECT_LT(ms.count(), 3000) << status.toString();
    ok = ok && failed && stillWorks(t, world);
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

// Two ranks at fault in the same call: each stands in (the other counts as having failed alike),
// the peers fail naming the lower one, and the next call works everywhere.
TEST(MpiBackendBadInput, AxesNamingNoGroupOnTwoRanksFailEveryRankAtOnce) {
  if (worldSize() < 3) GTEST_SKIP() << "needs two ranks at fault and a peer";
  BackendUnderTest t = checkedBackend();
  ASSERT_TRUE(allRanksAgree(t.status.isOk())) << t.status.toString();
  const AxisSet world = t.mesh.allAxes();
  bool ok = stillWorks(t, world);
  const bool culprit = worldRank() == 1 || worldRank() == worldSize() - 1;
  std::vector<float> data(16, 1.0f);
  const Status status = t.backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum,
                                             culprit ? AxisSet::fromBits(1u << 7) : world);
  const bool failed = culprit ? has(status, StatusCode::InvalidArgument, "does not have")
                              : has(status, StatusCode::Mismatch, "rank 1 failed this call before it knew");
  EXPECT_TRUE(failed) << status.toString();
  ok = ok && failed && stillWorks(t, world) && stillWorks(t);
  EXPECT_TRUE(allRanksAgree(ok));
}

// The same in an axis group (its communicator exists): the members of rank 0's group fail, the
// other groups' calls work, and those ranks' next call (over the world, which asks rank 0 to
// stand in while it is still inside its failed call) is declined and works, as on every rank.
TEST(MpiBackendBadInput, AxesNamingNoGroupFailOnlyTheGroupOfTheRankAtFault) {
  if (worldSize() < 2) GTEST_SKIP() << "needs a peer";
  BackendUnderTest t = checkedBackend();
  ASSERT_TRUE(allRanksAgree(t.status.isOk())) << t.status.toString();
  const bool culprit = worldRank() == 0;
  const bool inCulpritsGroup = t.mesh.groupColor(0, t.axes) == t.mesh.groupColor(worldRank(), t.axes);
  const AxisSet world = t.mesh.allAxes();
  bool ok = stillWorks(t) && stillWorks(t, world);
  std::vector<float> data(16, 1.0f);
  const Status status = t.backend->allReduce(data.data(), data.data(), data.size(), DataType::F32, ReduceOp::Sum,
                                             culprit ? AxisSet::fromBits(1u << 7) : t.axes);
  bool failed = false;
  if (culprit) {
    failed = has(status, StatusCode::InvalidArgument, "does not have");
  } else if (inCulpritsGroup) {
    failed = has(status, StatusCode::Mismatch, "rank 0 failed this call before it knew the call's group");
  } else {
    failed = status.isOk() && data.front() == static_cast<float>(t.mesh.groupSize(t.axes));
  }
  EXPECT_TRUE(failed) << status.toString();
  ok = ok && failed && stillWorks(t, world) && stillWorks(t);
  EXPECT_TRUE(allRanksAgree(ok));
}

TEST(MpiBackendBadInput, NullBufferOnOneRankFailsEveryRank) {
  BackendUnderTest t = checkedBackend();
  const bool culprit = worldRank() == 0;
  std::vector<float> data(16, 1.0f);
  const Status status = t.status.isOk() ? t.backend->allReduce(culprit ? nullptr : data.data(), data.data(), 16,
                                                               DataType::F32, ReduceOp::Sum, t.axes)
                                        : t.status;
  const bool inGroupWithCulprit = t.mesh.groupColor(0, t.axes) == t.mesh.groupColor(worldRank(), t.axes);
  bool ok = true;
  if (culprit) {
    ok = has(status, StatusCode::InvalidArgument, "allReduce send buffer is null but count is 16");
  } else if (inGroupWithCulprit) {
    ok = has(status, StatusCode::Mismatch, ": rank 0 of group");
  } else {
    ok = status.isOk();  // other groups never see rank 0's input
  }
  EXPECT_TRUE(ok) << status.toString();
  EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
}

// A wrapper's own check failing on rank 0 (refuseCollective) fails its group's members in
// whichever collective they called; refusing with the check off sends nothing.
TEST(MpiBackendBadInput, ARefusedCollectiveFailsEveryMemberOfTheGroup) {
  for (const OpKind peersCall : {OpKind::AllGather, OpKind::ReduceScatter, OpKind::Broadcast}) {
    BackendUnderTest t = checkedBackend();
    const bool culprit = worldRank() == 0;
    const int members = t.mesh.groupSize(t.axes);
    std::vector<float> in(static_cast<std::size_t>(members) * 4, 1.0f), out(in.size());
    Status status = t.status;
    if (status.isOk() && culprit) {
      status = t.backend->refuseCollective(t.axes, Status::invalidArgument("output has 3 elements, expected 4"));
    } else if (status.isOk() && peersCall == OpKind::AllGather) {
      status = t.backend->allGather(in.data(), out.data(), 4, DataType::F32, t.axes);
    } else if (status.isOk() && peersCall == OpKind::ReduceScatter) {
      status = t.backend->reduceScatter(in.data(), out.data(), 4, DataType::F32, ReduceOp::Sum, t.axes);
    } else if (status.isOk()) {
      status = t.backend->broadcast(in.data(), out.data(), 4, DataType::F32, 0, t.axes);
    }
    const bool inGroupWithCulprit = t.mesh.groupColor(0, t.axes) == t.mesh.groupColor(worldRank(), t.axes);
    bool ok = true;
    if (culprit) {
      ok = has(status, StatusCode::InvalidArgument, "output has 3 elements");
    } else if (inGroupWithCulprit) {
      ok = has(status, StatusCode::Mismatch, ": rank 0 of group");
    } else {
      ok = status.isOk();
    }
    EXPECT_TRUE(ok) << opKindName(peersCall) << ": " << status.toString();
    EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
  }
  auto options = testOptions(detail::MpiAlgorithm::Auto);
  options.checkArgs = false;
  BackendUnderTest t = makeBackend(groupCases(worldSize()).front(), options);
  const Status refused =
      t.status.isOk() ? t.backend->refuseCollective(t.axes, Status::invalidArgument("bad")) : t.status;
  EXPECT_TRUE(has(refused, StatusCode::InvalidArgument, "bad")) << refused.toString();
  EXPECT_TRUE(allRanksAgree(has(refused, StatusCode::InvalidArgument, "bad") && stillWorks(t)));
}

TEST(MpiBackendBadInput, DifferentCountsDtypesOrCollectivesAreMismatchOnEveryRank) {
  BackendUnderTest t = checkedBackend();
  bool ok = t.status.isOk();
  const bool odd = t.mesh.groupIndex(worldRank(), t.axes) == 0;  // one member per group differs
  const bool alone = t.mesh.groupSize(t.axes) == 1;              // a group of one agrees with itself
  std::vector<double> a(64, 1.0);
  std::vector<double> b(64, 0.0);
  if (ok) {
    const Status counts = t.backend->allReduce(a.data(), b.data(), odd ? 17 : 16, DataType::F64, ReduceOp::Sum, t.axes);
    const bool countsOk = alone ? counts.isOk() : has(counts, StatusCode::Mismatch, "count differs (min 16, max 17)");
    EXPECT_TRUE(countsOk) << counts.toString();
    const Status dtypes = t.backend->broadcast(a.data(), b.data(), 8, odd ? DataType::F32 : DataType::F64, 0, t.axes);
    const bool dtypesOk = alone ? dtypes.isOk() : has(dtypes, StatusCode::Mismatch, "dtype differs");
    EXPECT_TRUE(dtypesOk) << dtypes.toString();
    const Status kinds = odd ? t.backend->allGather(a.data(), b.data(), 4, DataType::F64, t.axes)
                             : t.backend->allReduce(a.data(), b.data(), 4, DataType::F64, ReduceOp::Sum, t.axes);
    const bool kindsOk = alone ? kinds.isOk() : has(kinds, StatusCode::Mismatch, "collective differs");
    EXPECT_TRUE(kindsOk) << kinds.toString();
    ok = countsOk && dtypesOk && kindsOk;
  }
  EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
}

TEST(MpiBackendBadInput, BadRootAllToAllInPlaceUnknownDtypeAndOp) {
  BackendUnderTest t = checkedBackend();
  bool ok = t.status.isOk();
  std::vector<float> data(64, 1.0f);
  if (ok) {
    const int n = t.mesh.groupSize(t.axes);
    const Status root = t.backend->broadcast(data.data(), data.data(), 4, DataType::F32, n, t.axes);
    EXPECT_TRUE(has(root, StatusCode::InvalidArgument, "root")) << root.toString();
    const Status alias = t.backend->allToAll(data.data(), data.data(), 2, DataType::F32, t.axes);
    EXPECT_TRUE(has(alias, StatusCode::InvalidArgument, "send == recv")) << alias.toString();
    const Status dtype =
        t.backend->allReduce(data.data(), data.data(), 4, static_cast<DataType>(42), ReduceOp::Sum, t.axes);
    EXPECT_TRUE(has(dtype, StatusCode::InvalidArgument, "unknown dtype value 42")) << dtype.toString();
    const Status op =
        t.backend->reduceScatter(data.data(), data.data(), 1, DataType::F32, static_cast<ReduceOp>(9), t.axes);
    EXPECT_TRUE(has(op, StatusCode::InvalidArgument, "unknown reduce op value 9")) << op.toString();
    ok = has(root, StatusCode::InvalidArgument, "root") && has(alias, StatusCode::InvalidArgument, "send == recv") &&
         has(dtype, StatusCode::InvalidArgument, "unknown dtype") &&
         has(op, StatusCode::InvalidArgument, "unknown reduce op");
  }
  EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
}

TEST(MpiBackendBadInput, PointToPointPeersAndAllocation) {
  BackendUnderTest t = checkedBackend();
  bool ok = t.status.isOk();
  std::vector<float> data(8, 1.0f);
  if (ok) {
    const Status far = t.backend->send(data.data(), 8, DataType::F32, worldSize());
    const Status self = t.backend->recv(data.data(), 8, DataType::F32, worldRank());
    // Both ends of each pair (r, r xor 1) pass a null buffer: each refuses the other, and both
    // return their own InvalidArgument at once.
    const P2POp nullOp{P2POp::Kind::Send, nullptr, 8, DataType::F32, worldRank() ^ 1};
    const Status grouped = t.backend->groupedP2P(std::span<const P2POp>(&nullOp, 1));
    void* memory = nullptr;
    const Status zero = t.backend->allocate(0, &memory);
    ok = has(far, StatusCode::InvalidArgument, "is not a world rank") &&
         has(self, StatusCode::InvalidArgument, "self") &&
         has(grouped, StatusCode::InvalidArgument, "groupedP2P op 0: point-to-point buffer is null") &&
         has(zero, StatusCode::InvalidArgument, "0 bytes");
    EXPECT_TRUE(ok) << far.toString() << " | " << self.toString() << " | " << grouped.toString() << " | "
                    << zero.toString();
  }
  EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
}

TEST(MpiBackendBadInput, MeshWorldMismatchAndBadEnvironment) {
  std::unique_ptr<Backend> backend;
  const Status wrongSize = detail::createMpiBackend(Mesh::flat(worldSize() + 1), detail::MpiBackendOptions{}, backend);
  bool ok = has(wrongSize, StatusCode::InvalidArgument, "MPI world has");
  EXPECT_TRUE(ok) << wrongSize.toString();
  setenv("CHIMERA_MPI_ALGORITHM", "fastest", 1);
  detail::MpiBackendOptions options;
  const Status env = detail::mpiBackendOptionsFromEnv(options);
  unsetenv("CHIMERA_MPI_ALGORITHM");
  EXPECT_TRUE(has(env, StatusCode::InvalidArgument, "CHIMERA_MPI_ALGORITHM='fastest'")) << env.toString();
  ok = ok && has(env, StatusCode::InvalidArgument, "CHIMERA_MPI_ALGORITHM");
  // A malformed log level is no longer silently "warn": creating the backend names it.
  setenv("CHIMERA_LOG_LEVEL", "loud", 1);
  const Status level = detail::createMpiBackend(Mesh::flat(worldSize()), detail::MpiBackendOptions{}, backend);
  unsetenv("CHIMERA_LOG_LEVEL");
  EXPECT_TRUE(has(level, StatusCode::InvalidArgument, "CHIMERA_LOG_LEVEL='loud'")) << level.toString();
  ok = ok && has(level, StatusCode::InvalidArgument, "CHIMERA_LOG_LEVEL='loud'");
  EXPECT_TRUE(allRanksAgree(ok));
}

// Every rank exchanges 8 floats with every other in one groupedP2P, but rank 1 expects 9 from
// rank 0: that pair is Mismatch at both ends and its transfers are dropped, while every other
// pair's transfers complete (no third rank waits for ranks 0 and 1), with the right data.
TEST(MpiBackendBadInput, AMismatchedPairDropsOnlyItsOwnTransfers) {
  BackendUnderTest t = checkedBackend();
  bool ok = t.status.isOk();
  const int n = worldSize();
  const int me = worldRank();
  constexpr std::size_t kBlock = 9;  // room for the 9 rank 1 expects from rank 0
  std::vector<float> in(kBlock * static_cast<std::size_t>(n)), out(in.size(), -1.0f);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(me * 1000 + static_cast<int>(i));
  std::vector<P2POp> ops;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    const std::size_t at = kBlock * static_cast<std::size_t>(peer);
    const std::size_t expected = me == 1 && peer == 0 ? 9 : 8;
    ops.push_back({P2POp::Kind::Send, in.data() + at, 8, DataType::F32, peer});
    ops.push_back({P2POp::Kind::Recv, out.data() + at, expected, DataType::F32, peer});
  }
  const Status status = ok ? t.backend->groupedP2P(ops) : t.status;
  if (ok) {
    ok = me <= 1 ? has(status, StatusCode::Mismatch, "point-to-point arguments differ") : status.isOk();
    for (int peer = 0; peer < n; ++peer) {
      if (peer == me) continue;
      const bool dropped = (me == 0 && peer == 1) || (me == 1 && peer == 0);
      const std::size_t at = kBlock * static_cast<std::size_t>(peer);
      // Block `me` of `peer`'s input, or untouched where the pair's transfers were dropped.
      const float first = dropped ? -1.0f : static_cast<float>(peer * 1000 + static_cast<int>(kBlock) * me);
      ok = ok && out[at] == first;
    }
    EXPECT_TRUE(ok) << status.toString();
  }
  EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
}

// With checking off a uniform local error still returns at once (no communication).
TEST(MpiBackendBadInput, LocalErrorsWithoutCheckingReturnBeforeCommunicating) {
  auto options = testOptions(detail::MpiAlgorithm::Auto);
  options.checkArgs = false;
  BackendUnderTest t = makeBackend(groupCases(worldSize()).front(), options);
  bool ok = t.status.isOk();
  if (ok) {
    const Status status = t.backend->allGather(nullptr, nullptr, 4, DataType::U8, t.axes);
    ok = has(status, StatusCode::InvalidArgument, "allGather send buffer is null");
    EXPECT_TRUE(ok) << status.toString();
  }
  EXPECT_TRUE(allRanksAgree(ok && stillWorks(t)));
}

}  // namespace
}  // namespace chimera::testing
