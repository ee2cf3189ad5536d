// SPDX-License-Identifier: Apache-2.0
// The hierarchical AllReduce, ReduceScatter and AllGather on host placements faked on one
// machine (detail::createMpiBackendOnHosts): blocks, round-robin, uneven hosts, three hosts and a
// host per rank, on every group of two meshes, with exact integer-valued data checked against the
// values computed locally and, bit for bit, against the flat direct exchange and the MPI
// library's collective; then which calls take the hierarchical program under `auto`, and that a
// Session's windows reach it.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "backend_test_support.hpp"
#include "chimera/session.hpp"

namespace chimera::testing {
namespace {

using detail::MpiAlgorithm;
using detail::MpiBackend;

/// World rank r runs on host hosts[r].
struct Placement {
  std::string name;
  std::vector<int> hosts;
};

std::vector<Placement> placements() {
  return {
      {"blocks 4+4", {0, 0, 0, 0, 1, 1, 1, 1}},        {"round-robin", {0, 1, 0, 1, 0, 1, 0, 1}},
      {"uneven 3+5", {0, 0, 0, 1, 1, 1, 1, 1}},        {"uneven 5+3 interleaved", {0, 1, 0, 0, 1, 0, 1, 0}},
      {"three hosts 3+3+2", {7, 7, 3, 3, 3, 5, 5, 7}}, {"a host per rank", {0, 1, 2, 3, 4, 5, 6, 7}},
  };
}

/// The meshes and their groups: depending on the placement a group lies inside one host, spans
/// hosts with several members on some, or has one member per host.
struct MeshGroups {
  std::string mesh;
  std::vector<std::string> axes;
};
const MeshGroups kMeshes[] = {{"dp=4,tp=2", {"dp", "tp", "dp+tp"}}, {"pp=2,tp=4", {"tp", "pp"}}};

enum class Kind { AllReduce, ReduceScatter, AllGather };

std::string_view kindName(Kind kind) {
  switch (kind) {
    case Kind::AllReduce: return "allReduce";
    case Kind::ReduceScatter: return "reduceScatter";
    case Kind::AllGather: return "allGather";
  }
  return "?";
}

struct Reduction {
  DataType dtype;
  ReduceOp op;
};
constexpr Reduction kReductions[] = {{DataType::F32, ReduceOp::Sum},
                                     {DataType::I32, ReduceOp::Max},
                                     {DataType::BF16, ReduceOp::Avg},
                                     {DataType::F64, ReduceOp::Prod},
                                     {DataType::I64, ReduceOp::Min}};
constexpr Reduction kGathers[] = {
    {DataType::F32, ReduceOp::Sum}, {DataType::U8, ReduceOp::Sum}, {DataType::F16, ReduceOp::Sum}};
constexpr std::size_t kCounts[] = {1, 7, 1029};

/// One group of one mesh, with a backend of each program over it.
struct Subject {
  Mesh mesh;
  AxisSet axes;
  Backend* hierarchical = nullptr;  // forced hierarchical, on the placement under test
  Backend* flat = nullptr;          // the direct exchange
  Backend* library = nullptr;       // the MPI library
  std::string placement;
};

/// Hosts the members of this rank's group run on, as the hierarchical backend sees them.
int hostsOfGroup(const Subject& s) {
  const std::vector<int> hostOfRank = s.hierarchical->hostOfRank();
  std::set<int> hosts;
  for (const int r : s.mesh.groupRanks(worldRank(), s.axes)) hosts.insert(hostOfRank[static_cast<std::size_t>(r)]);
  return static_cast<int>(hosts.size());
}

/// The output of one call of `kind` on `backend`, with this rank's input from (seed, rank, index).
Status runOnce(Backend& backend, const Subject& s, Kind kind, Reduction r, std::size_t count, bool inPlace,
               std::uint32_t seed, std::vector<std::uint64_t>& out) {
  const int me = worldRank();
  const auto n = static_cast<std::size_t>(s.mesh.groupSize(s.axes));
  const auto gi = static_cast<std::size_t>(s.mesh.groupIndex(me, s.axes));
  const std::size_t es = dataTypeSize(r.dtype);
  const std::size_t inCount = kind == Kind::ReduceScatter ? count * n : count;
  const std::size_t outCount = kind == Kind::AllGather ? count * n : count;
  auto send = makeBuffer(inCount, r.dtype);
  out = makeBuffer(outCount, r.dtype);
  Status status;
  switch (kind) {
    case Kind::AllReduce: {
      for (std::size_t i = 0; i < count; ++i) storeElement(send.data(), i, r.dtype, inputValue(seed, me, i, r.op));
      if (inPlace) {
        status = backend.allReduce(send.data(), send.data(), count, r.dtype, r.op, s.axes);
        std::memcpy(out.data(), send.data(), count * es);
      } else {
        status = backend.allReduce(send.data(), out.data(), count, r.dtype, r.op, s.axes);
      }
      break;
    }
    case Kind::ReduceScatter: {
      for (std::size_t i = 0; i < inCount; ++i) storeElement(send.data(), i, r.dtype, inputValue(seed, me, i, r.op));
      if (inPlace) {
        auto* block = reinterpret_cast<std::byte*>(send.data()) + gi * count * es;
        status = backend.reduceScatter(send.data(), block, count, r.dtype, r.op, s.axes);
        std::memcpy(out.data(), block, count * es);
      } else {
        status = backend.reduceScatter(send.data(), out.data(), count, r.dtype, r.op, s.axes);
      }
      break;
    }
    case Kind::AllGather: {
      auto* target = inPlace ? reinterpret_cast<std::byte*>(out.data()) + gi * count * es
                             : reinterpret_cast<std::byte*>(send.data());
      for (std::size_t i = 0; i < count; ++i) storeElement(target, i, r.dtype, inputValue(seed, me, i, r.op));
      status = backend.allGather(target, out.data(), count, r.dtype, s.axes);
      break;
    }
  }
  return status;
}

/// The value element `i` of the output has, computed locally.
double expectedElement(const Subject& s, Kind kind, Reduction r, std::size_t count, std::uint32_t seed, std::size_t i) {
  const int me = worldRank();
  const auto members = s.mesh.groupRanks(me, s.axes);
  if (kind == Kind::AllGather) {
    std::uint64_t cell[2] = {0, 0};
    storeElement(cell, 0, r.dtype, inputValue(seed, members[i / count], i % count, r.op));
    return loadElement(cell, 0, r.dtype);
  }
  const std::size_t index =
      kind == Kind::ReduceScatter ? static_cast<std::size_t>(s.mesh.groupIndex(me, s.axes)) * count + i : i;
  std::vector<double> values;
  for (const int m : members) values.push_back(inputValue(seed, m, index, r.op));
  return expectedReduction(values, r.op, r.dtype);
}

/// One case on the three backends: the hierarchical result holds the expected values, equals
/// the flat and the library results byte for byte, and ran the hierarchical program exactly
/// when the group spans hosts.
void checkCase(const Subject& s, Kind kind, Reduction r, std::size_t count, bool inPlace, std::uint32_t seed,
               FirstFailure& failure) {
  const std::string what = fmt::format(
      "{} {} {} count {} {} on {} / {} placed {}", kindName(kind), dataTypeName(r.dtype), reduceOpName(r.op), count,
      inPlace ? "in place" : "out of place", s.mesh.toString(), s.mesh.axesName(s.axes), s.placement);
  auto& hierarchical = static_cast<MpiBackend&>(*s.hierarchical);
  const std::uint64_t before = hierarchical.hierarchicalCalls();
  std::vector<std::uint64_t> got, flat, library;
  Status status = runOnce(*s.hierarchical, s, kind, r, count, inPlace, seed, got);
  if (status.isOk()) status = runOnce(*s.flat, s, kind, r, count, inPlace, seed, flat);
  if (status.isOk()) status = runOnce(*s.library, s, kind, r, count, inPlace, seed, library);
  failure.record(status.isOk(), what + ": " + status.toString());
  if (!status.isOk()) return;
  const std::uint64_t ran = hierarchical.hierarchicalCalls() - before;
  const std::uint64_t want = hostsOfGroup(s) >= 2 ? 1 : 0;
  failure.record(ran == want, fmt::format("{}: ran the hierarchical program {} times, want {}", what, ran, want));
  const std::size_t n = static_cast<std::size_t>(s.mesh.groupSize(s.axes));
  const std::size_t outCount = kind == Kind::AllGather ? count * n : count;
  for (std::size_t i = 0; i < outCount && failure.ok; ++i) {
    const double value = loadElement(got.data(), i, r.dtype);
    const double expected = expectedElement(s, kind, r, count, seed, i);
    failure.record(matches(value, expected, r.op, r.dtype),
                   fmt::format("{}: element {} is {}, want {}", what, i, value, expected));
  }
  const std::size_t bytes = outCount * dataTypeSize(r.dtype);
  failure.record(std::memcmp(got.data(), flat.data(), bytes) == 0, what + ": differs from the flat direct exchange");
  failure.record(std::memcmp(got.data(), library.data(), bytes) == 0, what + ": differs from the MPI library");
}

std::unique_ptr<Backend> backendOnHosts(const Mesh& mesh, MpiAlgorithm algorithm, const std::vector<int>& hosts,
                                        Status& status) {
  std::unique_ptr<Backend> backend;
  status = detail::createMpiBackendOnHosts(mesh, testOptions(algorithm), hosts, backend);
  return backend;
}

/// Every case on every group of `meshGroups`, the hierarchical backend made by `makeHierarchical`.
template <typename MakeHierarchical>
void checkEveryGroup(const MeshGroups& meshGroups, const std::string& placement, std::uint32_t& seed,
                     MakeHierarchical makeHierarchical) {
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse(meshGroups.mesh, worldSize(), mesh).isOk());
  std::unique_ptr<Backend> flat, library, hierarchical;
  ASSERT_TRUE(detail::createMpiBackend(mesh, testOptions(MpiAlgorithm::PointToPoint), flat).isOk());
  ASSERT_TRUE(detail::createMpiBackend(mesh, testOptions(MpiAlgorithm::Library), library).isOk());
  const Status created = makeHierarchical(mesh, hierarchical);
  ASSERT_TRUE(created.isOk()) << created.toString();
  for (const std::string& axesText : meshGroups.axes) {
    Subject s{mesh, {}, hierarchical.get(), flat.get(), library.get(), placement};
    ASSERT_TRUE(mesh.parseAxes(axesText, s.axes).isOk());
    FirstFailure failure;
    for (std::size_t c = 0; c < std::size(kCounts); ++c) {
      for (const bool inPlace : {false, true}) {
        for (const Reduction r : kReductions) {
          checkCase(s, Kind::AllReduce, r, kCounts[c], inPlace, ++seed, failure);
          checkCase(s, Kind::ReduceScatter, r, kCounts[c] / 4 + 1, inPlace, ++seed, failure);
        }
        for (const Reduction r : kGathers)
          checkCase(s, Kind::AllGather, r, kCounts[c] / 4 + 1, inPlace, ++seed, failure);
      }
    }
    EXPECT_TRUE(allRanksAgree(failure.ok)) << meshGroups.mesh << " / " << axesText << " placed " << placement;
  }
}

TEST(HierarchicalCollectives, EqualTheFlatAndLibraryResultsOnEveryPlacement) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  std::uint32_t seed = 1;
  for (const MeshGroups& meshGroups : kMeshes) {
    for (const Placement& placement : placements()) {
      checkEveryGroup(meshGroups, placement.name, seed, [&](const Mesh& mesh, std::unique_ptr<Backend>& out) {
        return detail::createMpiBackendOnHosts(mesh, testOptions(MpiAlgorithm::Hierarchical), placement.hosts, out);
      });
    }
  }
}

// The same on the hosts the ranks really run on: one host in ordinary CI (the flat path, as
// `hierarchical` falls back to p2p there); the multi-host tier runs it across the rig's hosts.
TEST(HierarchicalCollectives, EqualTheFlatAndLibraryResultsWhereTheRanksRun) {
  if (worldSize() != 8) GTEST_SKIP() << "the meshes are of 8 ranks";
  std::uint32_t seed = 1000;
  for (const MeshGroups& meshGroups : kMeshes) {
    checkEveryGroup(meshGroups, "where the ranks run", seed, [](const Mesh& mesh, std::unique_ptr<Backend>& out) {
      return detail::createMpiBackend(mesh, testOptions(MpiAlgorithm::Hierarchical), out);
    });
  }
}

// Pipelined over pieces, an AllReduce may reduce an element on another member than in one piece,
// so on data whose sums round (random floats, bf16 averages) the order of its additions may
// differ: the result of many pieces (small segments) must be the same bits on every rank and
// within rounding of the result of one piece (a segment larger than the buffer). A
// ReduceScatter's elements keep their members: its pieces give one piece's bits. Exact integer data
// is checked bit for bit against the flat and library results above.
TEST(HierarchicalCollectives, PiecesKeepTheResultsOfOnePieceUpToTheAllReducesRounding) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("dp=4,tp=2", worldSize(), mesh).isOk());
  AxisSet all;
  ASSERT_TRUE(mesh.parseAxes("dp+tp", all).isOk());
  struct Rounding {
    Reduction reduction;
    double tolerance;  // of an element against one piece's, from the type's precision
  };
  constexpr Rounding kRounding[] = {{{DataType::F32, ReduceOp::Sum}, 1e-5},
                                    {{DataType::BF16, ReduceOp::Avg}, 0.03},
                                    {{DataType::F64, ReduceOp::Sum}, 1e-12}};
  constexpr std::size_t kCount = 40009;  // 8 pieces of at least two 256-byte segments, uneven blocks
  bool ok = true;
  for (const Placement& placement : placements()) {
    std::unique_ptr<Backend> pieces, whole;
    detail::MpiBackendOptions one = testOptions(MpiAlgorithm::Hierarchical);
    one.segmentBytes = std::size_t{1} << 30;
    ASSERT_TRUE(
        detail::createMpiBackendOnHosts(mesh, testOptions(MpiAlgorithm::Hierarchical), placement.hosts, pieces).isOk());
    ASSERT_TRUE(detail::createMpiBackendOnHosts(mesh, one, placement.hosts, whole).isOk());
    for (const Rounding& rounding : kRounding) {
      const Reduction r = rounding.reduction;
      const std::string what =
          fmt::format("{} {} placed {}", dataTypeName(r.dtype), reduceOpName(r.op), placement.name);
      std::vector<std::uint64_t> send = makeBuffer(kCount, r.dtype);
      for (std::size_t i = 0; i < kCount; ++i)
        storeElement(send.data(), i, r.dtype, patternHash(7, worldRank(), i) / 4294967296.0 - 0.37);
      std::vector<std::uint64_t> a = makeBuffer(kCount, r.dtype);
      std::vector<std::uint64_t> b = makeBuffer(kCount, r.dtype);
      const Status sa = pieces->allReduce(send.data(), a.data(), kCount, r.dtype, r.op, all);
      const Status sb = whole->allReduce(send.data(), b.data(), kCount, r.dtype, r.op, all);
      EXPECT_TRUE(sa.isOk() && sb.isOk()) << what << ": " << sa.toString() << " " << sb.toString();
      double worst = 0;
      for (std::size_t i = 0; i < kCount; ++i)
        worst = std::max(worst, std::abs(loadElement(a.data(), i, r.dtype) - loadElement(b.data(), i, r.dtype)));
      EXPECT_LE(worst, rounding.tolerance) << what;
      // One result on every rank: rank 0's bits broadcast and compared.
      std::vector<std::uint64_t> first = a;
      MPI_Bcast(first.data(), static_cast<int>(first.size() * sizeof(std::uint64_t)), MPI_BYTE, 0, MPI_COMM_WORLD);
      const bool same = std::memcmp(first.data(), a.data(), kCount * dataTypeSize(r.dtype)) == 0;
      EXPECT_TRUE(same) << what << ": differs from rank 0's";
      ok = ok && sa.isOk() && sb.isOk() && worst <= rounding.tolerance && same;
      // A ReduceScatter reduces every element on the same members whatever the pieces: the same bits.
      const std::size_t block = kCount / 8;
      std::vector<std::uint64_t> ra = makeBuffer(block, r.dtype);
      std::vector<std::uint64_t> rb = makeBuffer(block, r.dtype);
      const Status qa = pieces->reduceScatter(send.data(), ra.data(), block, r.dtype, r.op, all);
      const Status qb = whole->reduceScatter(send.data(), rb.data(), block, r.dtype, r.op, all);
      const bool equal =
          qa.isOk() && qb.isOk() && std::memcmp(ra.data(), rb.data(), block * dataTypeSize(r.dtype)) == 0;
      EXPECT_TRUE(equal) << what << ": the ReduceScatter in pieces differs from one piece's";
      ok = ok && equal;
    }
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

// Auto takes the hierarchical program for a group that spans hosts with several members on a
// host, from the point-to-point threshold on; never for a group inside one host, one with a
// member per host, or a small call.
TEST(HierarchicalCollectives, AutoChoosesItForGroupsThatSpanHosts) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("dp=4,tp=2", worldSize(), mesh).isOk());
  AxisSet dp, tp, all;
  ASSERT_TRUE(mesh.parseAxes("dp", dp).isOk() && mesh.parseAxes("tp", tp).isOk() &&
              mesh.parseAxes("dp+tp", all).isOk());
  const std::vector<int> blocks = {0, 0, 0, 0, 1, 1, 1, 1};      // dp spans the hosts (2 + 2), tp inside one
  const std::vector<int> roundRobin = {0, 1, 0, 1, 0, 1, 0, 1};  // dp inside one host, tp one member per host
  struct Expectation {
    const std::vector<int>* hosts;
    AxisSet axes;
    std::size_t count;  // f32 elements of an allReduce
    bool hierarchical;
  };
  const std::size_t large = std::size_t{1} << 18;  // 1 MiB: the AllReduce threshold
  const Expectation cases[] = {{&blocks, dp, large, true},      {&blocks, all, large, true},
                               {&blocks, tp, large, false},     {&blocks, dp, 1024, false},
                               {&roundRobin, dp, large, false}, {&roundRobin, tp, large, false},
                               {&roundRobin, all, large, true}};
  bool ok = true;
  for (const Expectation& e : cases) {
    Status status;
    auto backend = backendOnHosts(mesh, MpiAlgorithm::Auto, *e.hosts, status);
    ASSERT_TRUE(status.isOk()) << status.toString();
    std::vector<float> data(e.count, 1.0f);
    auto& mpi = static_cast<MpiBackend&>(*backend);
    status = backend->allReduce(data.data(), data.data(), e.count, DataType::F32, ReduceOp::Sum, e.axes);
    const bool ran = mpi.hierarchicalCalls() == 1;
    const bool right = data.front() == static_cast<float>(mesh.groupSize(e.axes)) && data.back() == data.front();
    ok = ok && status.isOk() && ran == e.hierarchical && right;
    EXPECT_TRUE(status.isOk()) << status.toString();
    EXPECT_EQ(ran, e.hierarchical) << mesh.axesName(e.axes) << ", " << e.count << " elements, hosts "
                                   << fmt::format("{}", fmt::join(*e.hosts, ","));
    EXPECT_TRUE(right);
    // ReduceScatter and AllGather follow the same rule at their own thresholds.
    const std::size_t n = static_cast<std::size_t>(mesh.groupSize(e.axes));
    std::vector<float> out(e.count / n);
    status = backend->reduceScatter(data.data(), out.data(), e.count / n, DataType::F32, ReduceOp::Sum, e.axes);
    ok = ok && status.isOk();
    status = backend->allGather(out.data(), data.data(), e.count / n, DataType::F32, e.axes);
    ok = ok && status.isOk();
    const std::uint64_t want = e.hierarchical ? 3 : 0;
    EXPECT_EQ(mpi.hierarchicalCalls(), want) << mesh.axesName(e.axes);
    ok = ok && mpi.hierarchicalCalls() == want;
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

// The backend reports the placement it was given, and refuses a list of the wrong size or lists
// that differ between the ranks.
TEST(HierarchicalCollectives, GivenHostsAreCheckedAndReported) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("world=8", worldSize(), mesh).isOk());
  Status status;
  auto backend = backendOnHosts(mesh, MpiAlgorithm::Auto, {5, 5, 9, 9, 5, 5, 9, 9}, status);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_EQ(backend->hostOfRank(), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  backendOnHosts(mesh, MpiAlgorithm::Auto, {0, 1}, status);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
  std::vector<int> differ = {0, 0, 0, 0, 1, 1, 1, 1};
  if (worldRank() == 3) differ[3] = 1;
  backendOnHosts(mesh, MpiAlgorithm::Auto, differ, status);
  EXPECT_EQ(status.code(), StatusCode::Mismatch) << status.toString();
  EXPECT_TRUE(allRanksAgree(status.code() == StatusCode::Mismatch));
}

// A Session over a backend whose dp groups span two hosts: the recorded AllReduce over dp, and
// the same consumed as a dp shard (a ReduceScatter), run the hierarchical program and give the sums.
TEST(HierarchicalCollectives, SessionWindowsTakeIt) {
  if (worldSize() != 8) GTEST_SKIP() << "the placements are of 8 ranks";
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("dp=4,tp=2", worldSize(), mesh).isOk());
  Status status;
  auto backend = backendOnHosts(mesh, MpiAlgorithm::Auto, {0, 0, 0, 0, 1, 1, 1, 1}, status);
  ASSERT_TRUE(status.isOk()) << status.toString();
  auto& mpi = static_cast<MpiBackend&>(*backend);
  AxisSet dp;
  ASSERT_TRUE(mesh.parseAxes("dp", dp).isOk());
  Layout partial, sharded;
  ASSERT_TRUE(Layout::parse("dp=P", mesh, partial).isOk());
  ASSERT_TRUE(Layout::parse("dp=S0", mesh, sharded).isOk());
  constexpr std::int64_t kRows = 512;
  constexpr std::int64_t kCols = 512;  // 1 MiB of f32 per rank
  const TensorSpec spec{{kRows, kCols}, DataType::F32};
  const auto members = mesh.groupRanks(worldRank(), dp);
  auto sum = [&](std::size_t i) {
    double total = 0;
    for (const int m : members) total += static_cast<double>((i + static_cast<std::size_t>(m)) % 5);
    return static_cast<float>(total);
  };
  bool ok = true;
  for (const bool consumeShard : {false, true}) {
    std::vector<float> buffer(static_cast<std::size_t>(kRows * kCols));
    for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>((i + worldRank()) % 5);
    std::unique_ptr<Session> session;
    ASSERT_TRUE(Session::create(*backend, SessionOptions{}, session).isOk());
    const std::uint64_t before = mpi.hierarchicalCalls();
    TensorHandle x, y;
    ASSERT_TRUE(session->tensor(buffer.data(), buffer.size() * 4, spec, partial, x).isOk());
    ASSERT_TRUE(session->allReduce(x, dp, y).isOk());
    status = consumeShard ? session->consume(y, sharded) : session->flush();
    EXPECT_TRUE(status.isOk()) << status.toString();
    const std::size_t rows = static_cast<std::size_t>(kRows) / members.size();
    const std::size_t first = consumeShard ? static_cast<std::size_t>(mesh.groupIndex(worldRank(), dp)) * rows : 0;
    const std::size_t last = consumeShard ? first + rows : static_cast<std::size_t>(kRows);
    bool right = status.isOk();
    for (std::size_t i = first * kCols; i < last * kCols && right; ++i) right = buffer[i] == sum(i);
    EXPECT_TRUE(right) << (consumeShard ? "consumed shard" : "flushed AllReduce");
    EXPECT_EQ(mpi.hierarchicalCalls() - before, 1u) << (consumeShard ? "consumed shard" : "flushed AllReduce");
    ok = ok && right && mpi.hierarchicalCalls() - before == 1;
  }
  EXPECT_TRUE(allRanksAgree(ok));
}

}  // namespace
}  // namespace chimera::testing
