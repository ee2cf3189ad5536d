// SPDX-License-Identifier: Apache-2.0
// AllGather, AllToAll and Broadcast of the MPI backend: every dtype x odd counts x
// in/out-of-place x axis groups, on both algorithm families.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "backend_test_support.hpp"
#include "core/type_lists.hpp"

namespace chimera::testing {
namespace {

constexpr std::size_t kCounts[] = {1, 7, 1029};
constexpr int kModulus = 251;  // fits u8; every dtype holds 0..250 exactly

std::byte* blockAt(std::vector<std::uint64_t>& buf, std::size_t block, std::size_t count, DataType dtype) {
  return reinterpret_cast<std::byte*>(buf.data()) + block * count * dataTypeSize(dtype);
}

void checkAllGather(BackendUnderTest& t, DataType dtype, std::size_t count, bool inPlace, std::uint32_t seed,
                    FirstFailure& failure) {
  const int me = worldRank();
  const auto members = t.mesh.groupRanks(me, t.axes);
  const auto g = static_cast<std::size_t>(t.mesh.groupIndex(me, t.axes));
  auto send = makeBuffer(count, dtype);
  auto recv = makeBuffer(count * members.size(), dtype);
  void* in = inPlace ? static_cast<void*>(blockAt(recv, g, count, dtype)) : send.data();
  for (std::size_t i = 0; i < count; ++i) storeElement(in, i, dtype, patternValue(seed, me, i, kModulus));
  const Status status = t.backend->allGather(in, recv.data(), count, dtype, t.axes);
  const std::string what = fmt::format("allGather {} count {} {} on {}", dataTypeName(dtype), count,
                                       inPlace ? "in-place" : "out-of-place", t.mesh.axesName(t.axes));
  failure.record(status.isOk(), what + ": " + status.toString());
  for (std::size_t m = 0; m < members.size() && status.isOk() && failure.ok; ++m) {
    for (std::size_t i = 0; i < count && failure.ok; ++i) {
      const double want = patternValue(seed, members[m], i, kModulus);
      const double got = loadElement(recv.data(), m * count + i, dtype);
      failure.record(got == want, fmt::format("{}: block {} element {} is {}, want {}", what, m, i, got, want));
    }
  }
}

void checkAllToAll(BackendUnderTest& t, DataType dtype, std::size_t count, std::uint32_t seed, FirstFailure& failure) {
  const int me = worldRank();
  const auto members = t.mesh.groupRanks(me, t.axes);
  const auto g = static_cast<std::size_t>(t.mesh.groupIndex(me, t.axes));
  const std::size_t total = count * members.size();
  auto send = makeBuffer(total, dtype);
  auto recv = makeBuffer(total, dtype);
  for (std::size_t i = 0; i < total; ++i) storeElement(send.data(), i, dtype, patternValue(seed, me, i, kModulus));
  const Status status = t.backend->allToAll(send.data(), recv.data(), count, dtype, t.axes);
  const std::string what =
      fmt::format("allToAll {} count {} on {}", dataTypeName(dtype), count, t.mesh.axesName(t.axes));
  failure.record(status.isOk(), what + ": " + status.toString());
  for (std::size_t m = 0; m < members.size() && status.isOk() && failure.ok; ++m) {
    for (std::size_t i = 0; i < count && failure.ok; ++i) {
      const double want = patternValue(seed, members[m], g * count + i, kModulus);
      const double got = loadElement(recv.data(), m * count + i, dtype);
      failure.record(got == want, fmt::format("{}: block {} element {} is {}, want {}", what, m, i, got, want));
    }
  }
}

void checkBroadcast(BackendUnderTest& t, DataType dtype, std::size_t count, bool inPlace, int root, std::uint32_t seed,
                    FirstFailure& failure) {
  const int me = worldRank();
  const int rootRank = t.mesh.groupPeer(me, t.axes, root);
  auto send = makeBuffer(count, dtype);
  auto recv = makeBuffer(count, dtype);
  for (std::size_t i = 0; i < count; ++i) {
    storeElement(send.data(), i, dtype, patternValue(seed, me, i, kModulus));
    storeElement(recv.data(), i, dtype, 1 + patternValue(seed + 1, me, i, 7));  // stale data to overwrite
  }
  void* out = inPlace ? static_cast<void*>(send.data()) : recv.data();
  const Status status = t.backend->broadcast(send.data(), out, count, dtype, root, t.axes);
  const std::string what = fmt::format("broadcast {} count {} root {} {} on {}", dataTypeName(dtype), count, root,
                                       inPlace ? "in-place" : "out-of-place", t.mesh.axesName(t.axes));
  failure.record(status.isOk(), what + ": " + status.toString());
  for (std::size_t i = 0; i < count && status.isOk() && failure.ok; ++i) {
    const double want = patternValue(seed, rootRank, i, kModulus);
    const double got = loadElement(out, i, dtype);
    failure.record(got == want, fmt::format("{}: element {} is {}, want {}", what, i, got, want));
  }
}

template <typename PerCase>
void sweep(PerCase perCase) {
  std::uint32_t seed = 1000;
  forEachBackend([&](BackendUnderTest& t, FirstFailure& failure) {
    for (const DataType dtype : kAllDataTypes)
      for (const std::size_t count : kCounts) perCase(t, dtype, count, seed++, failure);
  });
}

TEST(MpiBackend, AllGatherEveryTypeCountAndGroup) {
  sweep([](BackendUnderTest& t, DataType dtype, std::size_t count, std::uint32_t seed, FirstFailure& failure) {
    checkAllGather(t, dtype, count, false, seed, failure);
    checkAllGather(t, dtype, count, true, seed + 7777, failure);
  });
}

TEST(MpiBackend, AllToAllEveryTypeCountAndGroup) {
  sweep([](BackendUnderTest& t, DataType dtype, std::size_t count, std::uint32_t seed, FirstFailure& failure) {
    checkAllToAll(t, dtype, count, seed, failure);
  });
}

TEST(MpiBackend, BroadcastEveryTypeCountRootAndGroup) {
  sweep([](BackendUnderTest& t, DataType dtype, std::size_t count, std::uint32_t seed, FirstFailure& failure) {
    const int last = t.mesh.groupSize(t.axes) - 1;
    checkBroadcast(t, dtype, count, false, 0, seed, failure);
    checkBroadcast(t, dtype, count, true, last, seed + 7777, failure);
  });
}

}  // namespace
}  // namespace chimera::testing
