// SPDX-License-Identifier: Apache-2.0
// Pipelined fused plans on real MPI ranks: every chain of the executor tests, run in 2 and 4
// chunks (contiguous chunks where a rank's part is one run, packed ones elsewhere), must
// give exactly the baseline's output on every rank.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "chimera/mpi_backend.hpp"
#include "chimera/planning/pipeline.hpp"
#include "chimera/planning/pipelined_chain.hpp"
#include "executor_test_support.hpp"

namespace chimera::testing {
namespace {

std::size_t localBytes(const Layout& layout, const TensorSpec& spec, int rank) {
  return layout.holds(rank) ? static_cast<std::size_t>(layout.localBytes(spec)) : 0;
}

TEST(ExecutorPipeline, ChunkedFusedPlanEqualsTheBaseline) {
  int pipelined = 0;
  for (const ChainCase& c : chainCases(worldSize())) {
    Mesh mesh;
    std::unique_ptr<Backend> backend;
    Status status = Mesh::parse(c.mesh, worldSize(), mesh);
    if (status.isOk()) status = createMpiBackend(mesh, backend);
    ChainRequest request;
    request.spec = TensorSpec{c.shape, DataType::F32};
    Layout consume;
    if (status.isOk()) status = Layout::parse(c.from, mesh, request.from);
    if (status.isOk()) status = Chain::parse(c.chain, mesh, request.chain);
    if (status.isOk()) status = Layout::parse(c.consume, mesh, consume);
    request.consume = consume;
    if (!allRanksAgree(status.isOk())) {
      ADD_FAILURE() << c.name << " on " << c.mesh << ": " << status.toString();
      return;
    }
    Executor executor(*backend);
    const ChainPlan* plan = nullptr;
    if (!allRanksAgree(executor.plan(request, plan).isOk())) {
      ADD_FAILURE() << c.name << ": plan failed";
      return;
    }
    const int dim = pipelineDim(*plan);
    if (!allRanksAgree(dim >= 0)) {
      ADD_FAILURE() << c.name << ": no pipeline dim";
      return;
    }
    const std::int64_t blocks = pipelineBlocks(*plan, dim);
    const int rank = worldRank();
    const std::vector<std::uint64_t> input = makeInput(request.from, request.spec, rank);
    const std::size_t inBytes = localBytes(request.from, request.spec, rank);
    const std::size_t outBytes = localBytes(plan->consumed, request.spec, rank);
    std::vector<std::uint64_t> baseline = makeBuffer(outBytes / 4, request.spec.dtype);
    status = executor.runChain(request, ChainMode::Baseline, inBytes ? input.data() : nullptr, inBytes,
                               outBytes ? baseline.data() : nullptr, outBytes);
    if (!allRanksAgree(status.isOk())) {
      ADD_FAILURE() << c.name << ": baseline " << status.toString();
      return;
    }
    for (const int chunks : {2, 4}) {
      if ((c.shape[static_cast<std::size_t>(dim)] / blocks) % chunks != 0) continue;
      PipelinedChain pipeline(executor, *backend, request, chunks);
      std::vector<std::uint64_t> output = makeBuffer(outBytes / 4, request.spec.dtype);
      status = pipeline.run(inBytes ? input.data() : nullptr, inBytes, outBytes ? output.data() : nullptr, outBytes);
      const bool same = status.isOk() && std::memcmp(output.data(), baseline.data(), outBytes) == 0;
      EXPECT_TRUE(allRanksAgree(same)) << c.name << " on " << c.mesh << ", dim " << dim << ", " << chunks
                                       << " chunks: " << status.toString();
      ++pipelined;
    }
  }
  if (worldSize() == 8) {
    EXPECT_GE(pipelined, 20);  // 23: the 12 cases in 2 and 4 chunks where they divide
  }
}

}  // namespace
}  // namespace chimera::testing
