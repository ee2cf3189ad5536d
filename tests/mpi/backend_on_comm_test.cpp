// SPDX-License-Identifier: Apache-2.0
// The MPI backend made on a communicator the caller owns (createMpiBackendOnComm) and with
// explicit options: collectives run over that communicator's ranks only, and bad arguments
// are clear errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <vector>

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

TEST(BackendOptions, EnvironmentTimeoutIsTheDefault) {
  MpiBackendOptions options;
  ASSERT_TRUE(MpiBackendOptions::fromEnvironment(options).isOk());
  const char* text = std::getenv("CHIMERA_TIMEOUT_MS");
  EXPECT_EQ(options.timeoutMs, text != nullptr && *text != '\0' ? std::stoll(text) : 600000);
}

}  // namespace
}  // namespace chimera::testing
