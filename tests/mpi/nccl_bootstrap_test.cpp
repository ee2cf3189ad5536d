// SPDX-License-Identifier: Apache-2.0
// createNcclBackendMpi's bootstrap under MPI, on any machine (no GPU needed): what a single
// rank can fail on by itself is agreed on before any rank enters NCCL's communicator
// creation, so a bad environment on one rank fails every rank at once instead of leaving
// the others waiting inside ncclCommInitRank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "chimera/mesh.hpp"
#include "chimera/nccl_backend.hpp"

namespace chimera {
namespace {

TEST(NcclBootstrapMpi, OneRanksBadEnvironmentFailsEveryRankBeforeNccl) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == size - 1) {
    setenv("CHIMERA_TIMEOUT_MS", "soon", 1);
  } else {
    unsetenv("CHIMERA_TIMEOUT_MS");
  }
  std::unique_ptr<Backend> backend;
  const Status status = createNcclBackendMpi(Mesh::flat(size), backend);
  unsetenv("CHIMERA_TIMEOUT_MS");
  EXPECT_FALSE(backend);
  if (rank == size - 1) {
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << status.toString();
    EXPECT_NE(status.message().find("CHIMERA_TIMEOUT_MS='soon'"), std::string::npos) << status.message();
  } else {
    // Not the device or NCCL error it would meet next: the environment step, agreed first.
    EXPECT_EQ(status.code(), StatusCode::BackendError) << status.toString();
    EXPECT_NE(status.message().find("another rank failed at reading the environment"), std::string::npos)
        << status.message();
  }
}

}  // namespace
}  // namespace chimera
