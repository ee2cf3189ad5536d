// SPDX-License-Identifier: Apache-2.0
// The MPI backend made on a communicator the caller owns (createMpiBackendOnComm), on chosen
// world ranks (createMpiBackendOnRanks) and with explicit options: collectives run over those
// ranks only, in the mesh order given, and bad arguments are clear errors that return at once.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "chimera/mpi_backend.hpp"
#include "mpi_test_util.hpp"

namespace chimera::testing {
namespace {

// Two halves of the world, each its own job: a backend per half sums over that half only.
TEST(BackendOnComm, HalvesOfTheWorldRunTheirOwnCollectives) {
  const int rank = worldRank();
  const int size = worldSize();
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  const int half = rank < size / 2 ? 0 : 1;
  MPI_Comm comm = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, half, rank, &comm), MPI_SUCCESS);
  int members = 0;
  MPI_Comm_size(comm, &members);
  MpiBackendOptions options;
  ASSERT_TRUE(MpiBackendOptions::fromEnvironment(options).isOk());
  options.algorithm = MpiAlgorithm::PointToPoint;
  std::unique_ptr<Backend> backend;
  const Status made = createMpiBackendOnComm(&comm, Mesh::flat(members), options, backend);
  ASSERT_TRUE(allRanksAgree(made.isOk())) << made.toString();
  std::vector<std::int64_t> values{rank, 1};
  const Status summed =
      backend->allReduce(values.data(), values.data(), 2, DataType::I64, ReduceOp::Sum, backend->mesh().allAxes());
  EXPECT_TRUE(summed.isOk()) << summed.toString();
  const int first = half == 0 ? 0 : size / 2;
  std::int64_t expected = 0;
  for (int r = first; r < first + members; ++r) expected += r;
  EXPECT_EQ(values[0], expected);
  EXPECT_EQ(values[1], members);
  EXPECT_EQ(backend->rank(), rank - first);
  backend.reset();
  MPI_Comm_free(&comm);
}

TEST(BackendOnComm, BadArgumentsAreClearErrors) {
  std::unique_ptr<Backend> backend;
  const MpiBackendOptions options;
  const Status null = createMpiBackendOnComm(nullptr, Mesh::flat(worldSize()), options, backend);
  EXPECT_EQ(null.code(), StatusCode::InvalidArgument);
  MPI_Comm none = MPI_COMM_NULL;
  const Status commNull = createMpiBackendOnComm(&none, Mesh::flat(worldSize()), options, backend);
  EXPECT_EQ(commNull.code(), StatusCode::InvalidArgument);
  MPI_Comm world = MPI_COMM_WORLD;
  const Status sizes = createMpiBackendOnComm(&world, Mesh::flat(worldSize() + 1), options, backend);
  EXPECT_EQ(sizes.code(), StatusCode::InvalidArgument);
  EXPECT_NE(sizes.message().find("ranks"), std::string::npos) << sizes.toString();
}

// On a backend created over `worldRanks` laid out as `mesh`, with this rank one of them: its rank
// is its index in the list, an AllGather of every member's world rank returns the list, and an
// AllReduce over the mesh's last axis sums the world ranks that the list puts in this rank's
// group along it. Local checks only (the caller agrees across the world).
bool collectivesFollowTheRankList(const std::vector<int>& worldRanks, const Mesh& mesh) {
  const int me = worldRank();
  const int index = static_cast<int>(std::find(worldRanks.begin(), worldRanks.end(), me) - worldRanks.begin());
  MpiBackendOptions options;
  if (!MpiBackendOptions::fromEnvironment(options).isOk()) return false;
  // A member that failed to create returns here: the others' collectives end in Timeout, well
  // inside the test's CTest timeout.
  options.timeoutMs = std::min<std::int64_t>(options.timeoutMs, 30000);
  std::unique_ptr<Backend> backend;
  const Status made = createMpiBackendOnRanks(worldRanks, mesh, options, backend);
  EXPECT_TRUE(made.isOk()) << made.toString();
  if (!made.isOk()) return false;
  EXPECT_EQ(backend->rank(), index);
  std::int64_t mine = me;
  std::vector<std::int64_t> gathered(worldRanks.size(), -1);
  const Status gather = backend->allGather(&mine, gathered.data(), 1, DataType::I64, mesh.allAxes());
  EXPECT_TRUE(gather.isOk()) << gather.toString();
  EXPECT_TRUE(std::equal(gathered.begin(), gathered.end(), worldRanks.begin()))
      << fmt::format("gathered {} over the list {}", fmt::join(gathered, ","), fmt::join(worldRanks, ","));
  const AxisSet last = AxisSet::fromBits(1u << (mesh.numAxes() - 1));
  std::int64_t sum = me;
  const Status reduce = backend->allReduce(&sum, &sum, 1, DataType::I64, ReduceOp::Sum, last);
  EXPECT_TRUE(reduce.isOk()) << reduce.toString();
  std::int64_t expected = 0;
  for (int member : mesh.groupRanks(index, last)) expected += worldRanks[static_cast<std::size_t>(member)];
  EXPECT_EQ(sum, expected) << "AllReduce over " << mesh.axesName(last) << " of mesh " << mesh.toString();
  return gather.isOk() && reduce.isOk() && backend->rank() == index &&
         std::equal(gathered.begin(), gathered.end(), worldRanks.begin()) && sum == expected;
}

// The whole world in reverse order as a two-axis mesh: not the row-major world, so a backend that
// ignored the list would gather the ranks in world order and sum other groups.
TEST(BackendOnRanks, TheMeshFollowsTheOrderOfTheList) {
  const int size = worldSize();
  if (size % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  std::vector<int> reversed(static_cast<std::size_t>(size));
  std::iota(reversed.rbegin(), reversed.rend(), 0);
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse(fmt::format("a=2,b={}", size / 2), mesh).isOk());
  EXPECT_TRUE(allRanksAgree(collectivesFollowTheRankList(reversed, mesh)));
}

// The odd world ranks, highest first: a strict subset runs its collectives while the even ranks
// take no part in the creation or the collectives.
TEST(BackendOnRanks, AStrictSubsetRunsWithoutTheOtherRanks) {
  const int size = worldSize();
  if (size < 4) GTEST_SKIP() << "needs 4 ranks (two odd ones)";
  std::vector<int> odd;
  for (int r = size - 1; r >= 0; --r)
    if (r % 2 == 1) odd.push_back(r);
  const bool ok = worldRank() % 2 == 0 || collectivesFollowTheRankList(odd, Mesh::flat(static_cast<int>(odd.size())));
  EXPECT_TRUE(allRanksAgree(ok));
}

// Every bad list is InvalidArgument naming the problem on the rank that passes it, before any
// message: each rank passes its lists alone (a meeting would wait for the others and time out).
TEST(BackendOnRanks, BadRankListsAreClearErrors) {
  const int me = worldRank();
  const int size = worldSize();
  MpiBackendOptions options;
  options.timeoutMs = 2000;  // a meeting would end in Timeout, not InvalidArgument
  std::vector<int> world(static_cast<std::size_t>(size));
  std::iota(world.begin(), world.end(), 0);
  auto expectInvalid = [&](const std::vector<int>& ranks, const Mesh& mesh, const std::string& naming) {
    std::unique_ptr<Backend> backend;
    const Status status = createMpiBackendOnRanks(ranks, mesh, options, backend);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
    EXPECT_NE(status.message().find(naming), std::string::npos) << status.toString() << " does not say: " << naming;
    EXPECT_EQ(backend, nullptr);
  };
  const Mesh larger = Mesh::flat(size + 1);
  expectInvalid(world, larger,
                fmt::format("{} world ranks for mesh {} of {} ranks", size, larger.toString(), size + 1));
  std::vector<int> outside = world;
  outside.back() = size;
  expectInvalid(outside, Mesh::flat(size), fmt::format("rank {} is outside the MPI world of {} ranks", size, size));
  std::vector<int> negative = world;
  negative.front() = -1;
  expectInvalid(negative, Mesh::flat(size), fmt::format("rank -1 is outside the MPI world of {} ranks", size));
  std::vector<int> twice = world;
  twice.back() = twice.front();
  expectInvalid(twice, Mesh::flat(size), fmt::format("rank {} is listed twice", twice.front()));
  std::vector<int> others;
  for (int r : world)
    if (r != me) others.push_back(r);
  if (!others.empty())
    expectInvalid(others, Mesh::flat(size - 1),
                  fmt::format("world rank {} is not one of the ranks it creates a backend over", me));
}

TEST(BackendOptions, EnvironmentTimeoutIsTheDefault) {
  MpiBackendOptions options;
  ASSERT_TRUE(MpiBackendOptions::fromEnvironment(options).isOk());
  const char* text = std::getenv("CHIMERA_TIMEOUT_MS");
  EXPECT_EQ(options.timeoutMs, text != nullptr && *text != '\0' ? std::stoll(text) : 600000);
}

}  // namespace
}  // namespace chimera::testing
