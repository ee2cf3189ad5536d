// SPDX-License-Identifier: Apache-2.0
// Send/Recv and grouped point-to-point of the MPI backend.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backend_test_support.hpp"
#include "core/type_lists.hpp"

namespace chimera::testing {
namespace {

constexpr int kModulus = 251;

// The world group, with MPI messages of any size or of at most 5 elements (the split of
// transfers beyond one MPI call's int count, on small counts).
BackendUnderTest worldBackend(bool smallMessages) {
  detail::MpiBackendOptions options = testOptions(detail::MpiAlgorithm::Auto);
  if (smallMessages) options.maxMessageCount = 5;
  return makeBackend(GroupCase{"world=" + std::to_string(worldSize()), "world"}, options);
}

class MpiPointToPoint : public ::testing::TestWithParam<bool> {};

// Even ranks send to the next odd rank, which receives, then the direction flips.
TEST_P(MpiPointToPoint, SendRecvBetweenPairs) {
  BackendUnderTest t = worldBackend(GetParam());
  FirstFailure failure;
  failure.record(t.status.isOk(), t.status.toString());
  const int me = worldRank();
  const int peer = me ^ 1;
  for (const DataType dtype : kAllDataTypes) {
    if (!t.status.isOk() || peer >= worldSize()) break;
    const std::size_t count = 1031;
    auto out = makeBuffer(count, dtype);
    auto in = makeBuffer(count, dtype);
    for (std::size_t i = 0; i < count; ++i) storeElement(out.data(), i, dtype, patternValue(5, me, i, kModulus));
    Status first = (me % 2 == 0) ? t.backend->send(out.data(), count, dtype, peer)
                                 : t.backend->recv(in.data(), count, dtype, peer);
    Status second = (me % 2 == 0) ? t.backend->recv(in.data(), count, dtype, peer)
                                  : t.backend->send(out.data(), count, dtype, peer);
    failure.record(first.isOk() && second.isOk(), first.toString() + " / " + second.toString());
    for (std::size_t i = 0; i < count && failure.ok; ++i) {
      const double want = patternValue(5, peer, i, kModulus);
      const double got = loadElement(in.data(), i, dtype);
      failure.record(got == want,
                     fmt::format("{} element {} from {} is {}, want {}", dataTypeName(dtype), i, peer, got, want));
    }
  }
  EXPECT_TRUE(allRanksAgree(failure.ok));
}

// Each rank sends one block to every rank (itself included) and receives one from each:
// a many-to-many exchange in one grouped call, two messages per pair to check ordering.
TEST_P(MpiPointToPoint, GroupedP2PManyToManyKeepsPairOrder) {
  BackendUnderTest t = worldBackend(GetParam());
  FirstFailure failure;
  failure.record(t.status.isOk(), t.status.toString());
  const int me = worldRank();
  const int n = worldSize();
  const std::size_t count = 257;
  const DataType dtype = DataType::I32;
  std::vector<std::vector<std::uint64_t>> outgoing;
  std::vector<std::vector<std::uint64_t>> incoming;
  std::vector<P2POp> ops;
  for (int peer = 0; peer < n && t.status.isOk(); ++peer) {
    for (int message = 0; message < 2; ++message) {
      outgoing.push_back(makeBuffer(count, dtype));
      incoming.push_back(makeBuffer(count, dtype));
    }
  }
  for (int peer = 0; peer < n && t.status.isOk(); ++peer) {
    for (int message = 0; message < 2; ++message) {
      const auto slot = static_cast<std::size_t>(2 * peer + message);
      for (std::size_t i = 0; i < count; ++i)
        storeElement(outgoing[slot].data(), i, dtype, 1000 * message + patternValue(9, me * n + peer, i, kModulus));
      ops.push_back({P2POp::Kind::Recv, incoming[slot].data(), count, dtype, peer});
      ops.push_back({P2POp::Kind::Send, outgoing[slot].data(), count, dtype, peer});
    }
  }
  if (t.status.isOk()) {
    const Status status = t.backend->groupedP2P(ops);
    failure.record(status.isOk(), status.toString());
    for (int peer = 0; peer < n && status.isOk() && failure.ok; ++peer) {
      for (int message = 0; message < 2 && failure.ok; ++message) {
        const auto slot = static_cast<std::size_t>(2 * peer + message);
        for (std::size_t i = 0; i < count && failure.ok; ++i) {
          const double want = 1000 * message + patternValue(9, peer * n + me, i, kModulus);
          const double got = loadElement(incoming[slot].data(), i, dtype);
          failure.record(got == want,
                         fmt::format("message {} from {} element {} is {}, want {}", message, peer, i, got, want));
        }
      }
    }
  }
  EXPECT_TRUE(allRanksAgree(failure.ok));
}

// With argument checking on, a pair whose sends and receives differ (count, dtype or number)
// gets Mismatch on both ends before any payload moves, and the backend stays usable.
TEST(MpiBackend, MismatchedPointToPointIsCaughtOnBothEnds) {
  BackendUnderTest t = worldBackend(false);
  ASSERT_TRUE(t.status.isOk()) << t.status.toString();
  const int me = worldRank();
  const int peer = me ^ 1;
  const bool sender = me % 2 == 0;
  std::vector<float> data(16, 1.0f);
  auto exchange = [&](std::size_t sendCount, std::size_t recvCount, DataType recvType, int recvMessages) {
    std::vector<P2POp> ops;
    if (sender) ops.push_back({P2POp::Kind::Send, data.data(), sendCount, DataType::F32, peer});
    for (int m = 0; !sender && m < recvMessages; ++m) {
      ops.push_back({P2POp::Kind::Recv, data.data(), recvCount, recvType, peer});
    }
    return t.backend->groupedP2P(ops);
  };
  const Status count = exchange(8, 9, DataType::F32, 1);
  const Status dtype = exchange(8, 8, DataType::I32, 1);
  const Status number = exchange(8, 8, DataType::F32, 2);
  const Status fine = exchange(8, 8, DataType::F32, 1);
  const std::string expected =
      sender ? fmt::format("rank {} sends rank {} [8 float] but rank {} receives [9 float]", me, peer, peer)
             : fmt::format("rank {} sends rank {} [8 float] but rank {} receives [9 float]", peer, me, me);
  const bool ok = count.code() == StatusCode::Mismatch && count.message().find(expected) != std::string::npos &&
                  dtype.code() == StatusCode::Mismatch && dtype.message().find("[8 int32]") != std::string::npos &&
                  number.code() == StatusCode::Mismatch &&
                  number.message().find("[8 float, 8 float]") != std::string::npos && fine.isOk();
  EXPECT_TRUE(ok) << count.toString() << " | " << dtype.toString() << " | " << number.toString() << " | "
                  << fine.toString();
  EXPECT_TRUE(allRanksAgree(ok));
}

// A box of a 3-D float tensor, and a whole tensor's values: element i of rank r's tensor holds
// patternValue(17, r, i).
struct BoxedTensor {
  std::vector<std::int64_t> shape;
  Box box;
  std::vector<float> values;
};

BoxedTensor boxedTensor(std::vector<std::int64_t> shape, Box box, int owner, bool filled) {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  BoxedTensor t{std::move(shape), std::move(box), std::vector<float>(n, -1.0f)};
  for (std::size_t i = 0; filled && i < n; ++i) t.values[i] = static_cast<float>(patternValue(17, owner, i, kModulus));
  return t;
}

// The elements of `box` of `t`, in row-major box order.
std::vector<float> boxValues(const BoxedTensor& t, const Box& box) {
  std::vector<float> out;
  for (std::int64_t a = 0; a < box.extent[0]; ++a)
    for (std::int64_t b = 0; b < box.extent[1]; ++b)
      for (std::int64_t c = 0; c < box.extent[2]; ++c)
        out.push_back(t.values[static_cast<std::size_t>(
            ((box.offset[0] + a) * t.shape[1] + box.offset[1] + b) * t.shape[2] + box.offset[2] + c)]);
  return out;
}

// Every rank sends a box of its tensor to the next rank and receives the previous rank's box
// into a box of another shape, next to a plain transfer in the same grouped call: the box lands
// element for element and nothing outside it changes. Runs where the backend reads its peers'
// memory (ranks of one host).
TEST(MpiBackend, BoxesMoveStraightBetweenTensors) {
  BackendUnderTest t = worldBackend(false);
  ASSERT_TRUE(t.status.isOk()) << t.status.toString();
  const int me = worldRank();
  const int n = worldSize();
  const int next = (me + 1) % n;
  const int prev = (me + n - 1) % n;
  if (n < 2 || !allRanksAgree(t.backend->movesBoxes(next) && t.backend->movesBoxes(prev)))
    GTEST_SKIP() << "the ranks here do not read each other's memory";
  const Box sent{{1, 2, 3}, {4, 5, 6}}, received{{2, 1, 0}, {4, 5, 6}};
  const BoxedTensor source = boxedTensor({6, 10, 12}, sent, me, true);
  BoxedTensor target = boxedTensor({8, 7, 9}, received, prev, false);
  std::vector<std::int32_t> plainOut(33, me), plainIn(33, -1);
  const std::vector<P2POp> ops = {
      {P2POp::Kind::Send, const_cast<float*>(source.values.data()), 120, DataType::F32, next, 0, &source.box,
       source.shape},
      {P2POp::Kind::Send, plainOut.data(), plainOut.size(), DataType::I32, next},
      {P2POp::Kind::Recv, target.values.data(), 120, DataType::F32, prev, 0, &target.box, target.shape},
      {P2POp::Kind::Recv, plainIn.data(), plainIn.size(), DataType::I32, prev},
  };
  const Status status = t.backend->groupedP2P(ops);
  EXPECT_TRUE(status.isOk()) << status.toString();
  const BoxedTensor theirs = boxedTensor({6, 10, 12}, sent, prev, true);
  bool ok = status.isOk() && boxValues(target, received) == boxValues(theirs, sent) &&
            plainIn == std::vector<std::int32_t>(33, prev);
  std::size_t outside = 0;  // elements outside the box that are no longer -1
  for (float v : target.values) outside += v != -1.0f ? 1 : 0;
  ok = ok && outside == 120;
  EXPECT_TRUE(ok) << "rank " << me << ": the box from rank " << prev << " did not land as sent (" << outside
                  << " elements written, 120 expected)";
  EXPECT_TRUE(allRanksAgree(ok));
}

// movesBoxesEverywhere is the world's answer: on every rank, whether every pair of ranks moves
// boxes; off with the reads.
TEST(MpiBackend, MovesBoxesEverywhereIsTheWorldsAnswer) {
  for (const bool read : {true, false}) {
    detail::MpiBackendOptions options = testOptions(detail::MpiAlgorithm::Auto);
    options.peerRead = read;
    const BackendUnderTest t = makeBackend(GroupCase{"world=" + std::to_string(worldSize()), "world"}, options);
    ASSERT_TRUE(t.status.isOk()) << t.status.toString();
    bool mine = true;
    for (int peer = 0; peer < worldSize(); ++peer) mine = mine && (peer == worldRank() || t.backend->movesBoxes(peer));
    const bool everywhere = t.backend->movesBoxesEverywhere();
    EXPECT_EQ(everywhere, allRanksAgree(mine) && worldSize() > 1) << "reads " << read;
    EXPECT_TRUE(allRanksAgree(everywhere) || allRanksAgree(!everywhere)) << "ranks answer differently";
    if (!read) {
      EXPECT_FALSE(everywhere);
    }
  }
}

// A pair whose boxes differ in extents (the same volume) fails on both ends, the receiver
// naming the boxes; one end with a box and the other without fails the argument agreement on
// both; the backend stays usable.
TEST(MpiBackend, BoxesThatDoNotMatchFailBothEnds) {
  BackendUnderTest t = worldBackend(false);
  ASSERT_TRUE(t.status.isOk()) << t.status.toString();
  const int me = worldRank();
  const int peer = me ^ 1;
  if (peer >= worldSize() || !allRanksAgree(peer >= worldSize() || t.backend->movesBoxes(peer)))
    GTEST_SKIP() << "needs pairs of ranks that read each other's memory";
  const bool sender = me % 2 == 0;
  BoxedTensor tensor = boxedTensor({6, 10, 12}, Box{{0, 0, 0}, {4, 5, 6}}, me, true);
  const Box other{{0, 0, 0}, {5, 4, 6}};
  auto exchange = [&](const Box* sendBox, const Box* recvBox) {
    const P2POp op{sender ? P2POp::Kind::Send : P2POp::Kind::Recv,
                   tensor.values.data(),
                   120,
                   DataType::F32,
                   peer,
                   0,
                   sender ? sendBox : recvBox,
                   tensor.shape};
    return t.backend->groupedP2P({&op, 1});
  };
  const Status extents = exchange(&tensor.box, &other);
  const Status oneSided = exchange(&tensor.box, nullptr);
  const Status fine = exchange(&tensor.box, &tensor.box);
  const bool ok =
      (sender ? extents.code() == StatusCode::Mismatch && extents.message().find("could not read") != std::string::npos
              : extents.code() == StatusCode::InvalidArgument &&
                    extents.message().find("does not match") != std::string::npos) &&
      oneSided.code() == StatusCode::Mismatch && oneSided.message().find("as a box") != std::string::npos &&
      fine.isOk();
  EXPECT_TRUE(ok) << extents.toString() << " | " << oneSided.toString() << " | " << fine.toString();
  EXPECT_TRUE(allRanksAgree(ok));
}

INSTANTIATE_TEST_SUITE_P(MessageSizes, MpiPointToPoint, ::testing::Bool(),
                         [](const auto& test) { return test.param ? "SplitInto5" : "Whole"; });

}  // namespace
}  // namespace chimera::testing
