// SPDX-License-Identifier: Apache-2.0
// The NCCL backend's MPI bootstrap collectives (src/nccl/mpi_bootstrap.hpp) on real
// MPI ranks, no GPU needed: the agreement on a step, the node-local rank, the broadcast of the
// unique id, and a rank that arrives late: a Timeout naming the step within CHIMERA_TIMEOUT_MS,
// where the blocking MPI calls they replace would wait for it.
#include <gtest/gtest.h>
#include <mpi.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "mpi/mpi_group.hpp"
#include "mpi_test_util.hpp"
#include "nccl/mpi_bootstrap.hpp"

namespace chimera::detail {
namespace {

// A world group over a duplicate of MPI_COMM_WORLD, freed at the end of the test.
class MpiBootstrap : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  void TearDown() override { MPI_Comm_free(&comm_); }
  MpiGroup world(std::int64_t timeoutMs = 60000) const {
    return worldGroup(comm_, rank_, size_, timeoutMs, "the world");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
};

TEST_F(MpiBootstrap, OneRanksFailureFailsEveryRank) {
  EXPECT_TRUE(agreeOnStep(world(), Status::ok(), "a step").isOk());
  const bool failing = rank_ == size_ - 1;
  const Status status =
      agreeOnStep(world(), failing ? Status::invalidArgument("bad value") : Status::ok(), "reading the environment");
  bool ok = false;
  if (failing) {
    ok = status.code() == StatusCode::InvalidArgument && status.message() == "bad value";
  } else {
    ok = status.code() == StatusCode::BackendError &&
         status.message().find("another rank failed at reading the environment") != std::string::npos;
  }
  EXPECT_TRUE(ok) << status.toString();
  EXPECT_TRUE(testing::allRanksAgree(ok));
}

TEST_F(MpiBootstrap, NodeLocalRankMatchesTheSharedMemorySplit) {
  int localRank = -1;
  int localRanks = -1;
  ASSERT_TRUE(nodeLocalRank(world(), localRank, localRanks).isOk());
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  int nodeRank = 0;
  int nodeSize = 0;
  MPI_Comm_rank(node, &nodeRank);
  MPI_Comm_size(node, &nodeSize);
  MPI_Comm_free(&node);
  EXPECT_EQ(localRank, nodeRank);
  EXPECT_EQ(localRanks, nodeSize);
  EXPECT_TRUE(testing::allRanksAgree(localRank == nodeRank && localRanks == nodeSize));
}

TEST_F(MpiBootstrap, BroadcastCopiesTheFirstRanksBytes) {
  std::array<std::byte, 128> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(rank_ == 0 ? (i * 7 + 3) % 256 : 0);
  ASSERT_TRUE(broadcastFromFirst(world(), bytes, "the NCCL unique id").isOk());
  bool ok = true;
  for (std::size_t i = 0; i < bytes.size(); ++i) ok = ok && bytes[i] == std::byte((i * 7 + 3) % 256);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(testing::allRanksAgree(ok));
}

// The last rank is busy elsewhere for 6x the others' timeout: they get a Timeout naming the
// step and the variable well before it arrives; when it does, its call matches theirs, so
// nothing is left pending.
TEST_F(MpiBootstrap, ALateRankIsATimeoutNotAHang) {
  constexpr std::int64_t kTimeoutMs = 250;
  const bool late = rank_ == size_ - 1;
  const auto start = std::chrono::steady_clock::now();
  if (late) std::this_thread::sleep_for(std::chrono::milliseconds(6 * kTimeoutMs));
  const Status status = agreeOnStep(world(kTimeoutMs), Status::ok(), "selecting a CUDA device");
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  bool ok = true;
  if (!late) {
    ok = status.code() == StatusCode::Timeout &&
         status.message().find("agreeing on selecting a CUDA device") != std::string::npos &&
         status.message().find("CHIMERA_TIMEOUT_MS") != std::string::npos && ms < 5 * kTimeoutMs;
    EXPECT_TRUE(ok) << status.toString() << " after " << ms << " ms";
  }
  MPI_Barrier(comm_);
  EXPECT_TRUE(testing::allRanksAgree(ok));
}

}  // namespace
}  // namespace chimera::detail
