// SPDX-License-Identifier: Apache-2.0
// AllReduce and ReduceScatter of the MPI backend: every dtype x op x in/out-of-place x odd
// counts x axis groups, on both algorithm families (own ring and the MPI library's).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backend_test_support.hpp"
#include "core/type_lists.hpp"

namespace chimera::testing {
namespace {

using detail::MpiAlgorithm;

constexpr std::size_t kCounts[] = {1, 7, 1029};

// Runs one AllReduce and checks every element; returns false on the first wrong one.
void checkAllReduce(BackendUnderTest& t, DataType dtype, ReduceOp op, std::size_t count, bool inPlace,
                    std::uint32_t seed, FirstFailure& failure) {
  const int me = worldRank();
  const auto members = t.mesh.groupRanks(me, t.axes);
  auto send = makeBuffer(count, dtype);
  auto recv = makeBuffer(count, dtype);
  for (std::size_t i = 0; i < count; ++i) storeElement(send.data(), i, dtype, inputValue(seed, me, i, op));
  void* out = inPlace ? static_cast<void*>(send.data()) : recv.data();
  const Status status = t.backend->allReduce(send.data(), out, count, dtype, op, t.axes);
  const std::string what = fmt::format("allReduce {} {} count {} {} on {}", dataTypeName(dtype), reduceOpName(op),
                                       count, inPlace ? "in-place" : "out-of-place", t.mesh.axesName(t.axes));
  failure.record(status.isOk(), what + ": " + status.toString());
  if (!status.isOk()) return;
  std::vector<double> values(members.size());
  for (std::size_t i = 0; i < count && failure.ok; ++i) {
    for (std::size_t m = 0; m < members.size(); ++m) values[m] = inputValue(seed, members[m], i, op);
    const double want = expectedReduction(values, op, dtype);
    const double got = loadElement(out, i, dtype);
    failure.record(matches(got, want, op, dtype), fmt::format("{}: element {} is {}, want {}", what, i, got, want));
  }
}

void checkReduceScatter(BackendUnderTest& t, DataType dtype, ReduceOp op, std::size_t recvCount, bool inPlace,
                        std::uint32_t seed, FirstFailure& failure) {
  const int me = worldRank();
  const auto members = t.mesh.groupRanks(me, t.axes);
  const auto g = static_cast<std::size_t>(t.mesh.groupIndex(me, t.axes));
  const std::size_t total = recvCount * members.size();
  auto send = makeBuffer(total, dtype);
  auto recv = makeBuffer(recvCount, dtype);
  for (std::size_t i = 0; i < total; ++i) storeElement(send.data(), i, dtype, inputValue(seed, me, i, op));
  void* out = inPlace
                  ? static_cast<void*>(reinterpret_cast<std::byte*>(send.data()) + g * recvCount * dataTypeSize(dtype))
                  : recv.data();
  const Status status = t.backend->reduceScatter(send.data(), out, recvCount, dtype, op, t.axes);
  const std::string what =
      fmt::format("reduceScatter {} {} recvCount {} {} on {}", dataTypeName(dtype), reduceOpName(op), recvCount,
                  inPlace ? "in-place" : "out-of-place", t.mesh.axesName(t.axes));
  failure.record(status.isOk(), what + ": " + status.toString());
  if (!status.isOk()) return;
  std::vector<double> values(members.size());
  for (std::size_t j = 0; j < recvCount && failure.ok; ++j) {
    for (std::size_t m = 0; m < members.size(); ++m) values[m] = inputValue(seed, members[m], g * recvCount + j, op);
    const double want = expectedReduction(values, op, dtype);
    const double got = loadElement(out, j, dtype);
    failure.record(matches(got, want, op, dtype), fmt::format("{}: element {} is {}, want {}", what, j, got, want));
  }
}

template <typename Check>
void sweep(Check check) {
  std::uint32_t seed = 1;
  forEachBackend([&](BackendUnderTest& t, FirstFailure& failure) {
    for (const DataType dtype : kAllDataTypes)
      for (const ReduceOp op : kAllReduceOps)
        for (const std::size_t count : kCounts)
          for (const bool inPlace : {false, true}) check(t, dtype, op, count, inPlace, seed++, failure);
  });
}

TEST(MpiBackend, AllReduceEveryTypeOpCountAndGroup) { sweep(checkAllReduce); }

TEST(MpiBackend, ReduceScatterEveryTypeOpCountAndGroup) { sweep(checkReduceScatter); }

// Auto selection at a size above every point-to-point threshold, default segment size, f32 sum.
TEST(MpiBackend, AutoAlgorithmLargeAllReduceAndReduceScatter) {
  auto options = testOptions(MpiAlgorithm::Auto);
  options.segmentBytes = std::size_t{1} << 20;
  BackendUnderTest t = makeBackend(groupCases(worldSize()).back(), options);
  FirstFailure failure;
  failure.record(t.status.isOk(), t.status.toString());
  if (t.status.isOk()) {
    checkAllReduce(t, DataType::F32, ReduceOp::Sum, (std::size_t{3} << 20) / 4 + 3, false, 77, failure);
    checkReduceScatter(t, DataType::F32, ReduceOp::Sum, (std::size_t{1} << 20) / 4 + 1, true, 78, failure);
  }
  EXPECT_TRUE(allRanksAgree(failure.ok));
}

}  // namespace
}  // namespace chimera::testing
