// SPDX-License-Identifier: Apache-2.0
// Executor::redistribute on real MPI ranks: every output element checked exactly against
// the logical tensor, and the plan cached on the first call.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "chimera/executor.hpp"
#include "chimera/mpi_backend.hpp"
#include "executor_test_support.hpp"

namespace chimera::testing {
namespace {

struct RedistributionCase {
  std::string from;
  std::string to;
};

TEST(ExecutorRedistribute, MatchesTheLogicalTensor) {
  const int world = worldSize();
  Mesh mesh;
  std::unique_ptr<Backend> backend;
  Status status = Mesh::parse("pp=2,tp=" + std::to_string(world / 2), world, mesh);
  if (status.isOk()) status = createMpiBackend(mesh, backend);
  if (!allRanksAgree(status.isOk())) {
    ADD_FAILURE() << status.toString();
    return;
  }
  Executor executor(*backend);
  const RedistributionCase cases[] = {
      {"tp=S0", "tp=S1"},
      {"tp=P", "tp=R"},
      {"tp=P", "pp+tp=S1"},
      {"pp=@0,tp=S0", "pp=@1,tp=S1"},
      {"pp=S1,tp=S0", "pp+tp=S0"},
      {"pp=@0,tp=P", "pp=@1,tp=S0"},
      {"tp=R", "tp=R"},
  };
  const int rank = worldRank();
  for (const auto& c : cases) {
    for (DataType dtype : {DataType::F32, DataType::I32}) {
      const TensorSpec spec{{16, 24, 8}, dtype};
      Layout from;
      Layout to;
      status = Layout::parse(c.from, mesh, from);
      if (status.isOk()) status = Layout::parse(c.to, mesh, to);
      if (!allRanksAgree(status.isOk())) {
        ADD_FAILURE() << status.toString();
        return;
      }
      const auto input = makeInput(from, spec, rank);
      const std::size_t inBytes = from.holds(rank) ? static_cast<std::size_t>(from.localBytes(spec)) : 0;
      const std::size_t outBytes = to.holds(rank) ? static_cast<std::size_t>(to.localBytes(spec)) : 0;
      auto output = makeBuffer(outBytes / dataTypeSize(dtype), dtype);
      for (int repeat = 0; repeat < 2; ++repeat) {
        status = executor.redistribute(spec, from, to, inBytes ? input.data() : nullptr, inBytes,
                                       outBytes ? output.data() : nullptr, outBytes);
        if (!allRanksAgree(status.isOk())) {
          ADD_FAILURE() << c.from << " -> " << c.to << ": " << status.toString();
          return;
        }
      }
      const int members = mesh.groupSize(from.axesOfKind(Placement::Kind::Partial));
      const int wrong = countWrong(output.data(), to, spec, rank, members, 1.0);
      EXPECT_TRUE(allRanksAgree(wrong == 0)) << c.from << " -> " << c.to << " " << dataTypeName(dtype) << ": " << wrong
                                             << " wrong elements on rank " << rank;
    }
  }
  // One planning pass per (case, dtype); the repeats hit the cache.
  EXPECT_EQ(executor.planningPasses(), 2 * std::size(cases));
  EXPECT_EQ(executor.cachedPlans(), 2 * std::size(cases));
}

}  // namespace
}  // namespace chimera::testing
