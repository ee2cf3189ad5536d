// SPDX-License-Identifier: Apache-2.0
// Pipelined fused plans on the simulator: the chain's tensor split into chunks along its
// pipeline dim, the chunk tensor's fused plan run on each chunk, the chunks joined again,
// must equal the chain's consumed data exactly (paper scenarios and random chains); the
// chunk count follows the cost model.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "chimera/planning/pipeline.hpp"
#include "chimera/planning/pipeline_cost.hpp"
#include "sim/simulator.hpp"

namespace chimera {
namespace {

struct Text {
  const char* mesh;
  int world;
  const char* shape;
  const char* from;
  const char* chain;
  const char* consume;
};

ChainPlan planText(const Text& t, const PlanCost& cost, TensorSpec& spec) {
  Mesh mesh;
  EXPECT_TRUE(Mesh::parse(t.mesh, t.world, mesh).isOk());
  spec.dtype = DataType::F32;
  EXPECT_TRUE(TensorSpec::parseShape(t.shape, spec.shape).isOk()) << t.shape;
  Layout from, consume;
  Chain chain;
  EXPECT_TRUE(Layout::parse(t.from, mesh, from).isOk());
  EXPECT_TRUE(Layout::parse(t.consume, mesh, consume).isOk());
  EXPECT_TRUE(Chain::parse(t.chain, mesh, chain).isOk());
  ChainPlan plan;
  const Status status = planChain(spec, from, chain, consume, cost, plan);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return plan;
}

std::int64_t splitCount(const Layout& layout, int dim) {
  std::int64_t count = 1;
  for (int axis : layout.splitAxes(dim)) count *= layout.mesh().axis(axis).size;
  return count;
}

// `t` with `dim` viewed as [outer, chunks, rest] (row-major data unchanged).
sim::LocalTensor expanded(sim::LocalTensor t, int dim, std::int64_t outer, int chunks) {
  const auto d = static_cast<std::size_t>(dim);
  const std::int64_t rest = t.shape[d] / (outer * chunks);
  t.shape[d] = outer;
  t.shape.insert(t.shape.begin() + static_cast<std::ptrdiff_t>(d) + 1, {static_cast<std::int64_t>(chunks), rest});
  return t;
}

// Merges dims dim..dim+2 of `t` back into one.
sim::LocalTensor merged(sim::LocalTensor t, int dim) {
  const auto d = static_cast<std::size_t>(dim);
  t.shape[d] *= t.shape[d + 1] * t.shape[d + 2];
  t.shape.erase(t.shape.begin() + static_cast<std::ptrdiff_t>(d) + 1,
                t.shape.begin() + static_cast<std::ptrdiff_t>(d) + 3);
  return t;
}

// Runs the chunk plans on the simulator and joins their outputs: chunk c of a rank's
// tensor is the c-th part of each of its pipelineBlocks blocks of `dim`.
sim::RankTensors runPipelined(const ChainPlan& whole, const TensorSpec& spec, int dim, int chunks,
                              const sim::RankTensors& input, const PlanCost& cost) {
  TensorSpec piece;
  EXPECT_TRUE(chunkSpec(spec, dim, chunks, piece).isOk());
  ChainPlan plan;
  EXPECT_TRUE(planChain(piece, whole.trace.layouts.front(), Chain{whole.trace.ops}, whole.consumed, cost, plan).isOk());
  const std::int64_t blocks = pipelineBlocks(whole, dim);
  const std::int64_t inOuter = blocks / splitCount(whole.trace.layouts.front(), dim);
  const std::int64_t outOuter = blocks / splitCount(whole.consumed, dim);
  std::vector<sim::RankTensors> outputs;
  for (int c = 0; c < chunks; ++c) {
    sim::RankTensors part(input.size());
    for (std::size_t r = 0; r < input.size(); ++r) {
      if (input[r]) part[r] = merged(sim::chunk(expanded(*input[r], dim, inOuter, chunks), dim + 1, chunks, c), dim);
    }
    sim::Traffic traffic;
    outputs.push_back(sim::runPlan(plan.fused, part, traffic));
  }
  sim::RankTensors joined(input.size());
  for (std::size_t r = 0; r < input.size(); ++r) {
    if (!outputs.front()[r]) continue;
    std::vector<sim::LocalTensor> parts;
    for (const auto& out : outputs) parts.push_back(expanded(*out[r], dim, outOuter, 1));
    joined[r] = merged(sim::concat(parts, dim + 1), dim);
  }
  return joined;
}

const Text kScenarios[] = {
    {"tp=8", 8, "64,256", "tp=P", "allreduce:tp", "tp=S0"},
    {"pp=2,tp=4", 8, "64,256", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"},
    {"sp=4,pp=2", 8, "64,256", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R"},
    {"pp=2,tp=4", 8, "16,32,64", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=S1"},
    {"pp=2,ep=4", 8, "8,64,64", "pp=@0,ep=S1", "send:pp,alltoall:ep:1:2", "pp=@1,ep=S2"},
    // Every dim split somewhere: chunks cut each block of the chunk dim.
    {"pp=2,ep=4", 8, "64,64", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1"},
    {"ep=2,tp=4", 8, "64,64", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1"},
    {"dp=2,sp=4", 8, "16,16,32", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2"},
    {"dp=2,tp=4", 8, "32,64", "dp=P,tp=P", "reducescatter:tp:0,reducescatter:dp:0", "tp+dp=S0"},
};

TEST(PipelinedPlan, ChunksJoinToTheChainsConsumedDataExactly) {
  const BytesCost cost;
  int checked = 0;
  for (const Text& t : kScenarios) {
    TensorSpec spec;
    const ChainPlan plan = planText(t, cost, spec);
    const int dim = pipelineDim(plan);
    ASSERT_GE(dim, 0) << t.chain;
    const sim::RankTensors input = sim::distribute(plan.trace.layouts.front(), spec, 3);
    sim::Traffic traffic;
    const sim::RankTensors expected =
        sim::consume(sim::runChain(plan.trace, spec, input, traffic), plan.trace.final(), plan.consumed, spec);
    for (const int chunks : {1, 2, 4}) {
      SCOPED_TRACE(fmt::format("{} from {}, dim {}, {} chunks", t.chain, t.from, dim, chunks));
      EXPECT_EQ(runPipelined(plan, spec, dim, chunks, input, cost), expected);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 27);
}

TEST(PipelinedPlan, PipelineDimIsTheOneWhoseChunksCopyTheFewestBytes) {
  const BytesCost cost;
  TensorSpec spec;
  // tp_pp: nothing is split in the chain's layouts (the fused plan's shards do not count),
  // so on dim 0 every chunk is a contiguous run of both ends: nothing is copied.
  const ChainPlan tpPp = planText(kScenarios[1], cost, spec);
  EXPECT_EQ(pipelineDim(tpPp), 0);
  EXPECT_EQ(pipelineCopyBytes(tpPp, spec, 0), 0);
  EXPECT_EQ(pipelineCopyBytes(tpPp, spec, 1), 2 * 64 * 256 * 4);  // column chunks: both ends
  // pp_sp starts split on dim 0 in 4 blocks: a stage-0 rank's chunk is a run of its shard,
  // only the gathered 64x256 result is unpacked. Along dim 1 both ends would be.
  const ChainPlan ppSp = planText(kScenarios[2], cost, spec);
  EXPECT_EQ(pipelineDim(ppSp), 0);
  EXPECT_EQ(pipelineBlocks(ppSp, 0), 4);
  EXPECT_EQ(pipelineCopyBytes(ppSp, spec, 0), 64 * 256 * 4);
  EXPECT_EQ(pipelineCopyBytes(ppSp, spec, 1), 16 * 256 * 4 + 64 * 256 * 4);
  // tp_sp: the result splits dim 0 in 8; a result chunk is a run, the input's are not.
  const ChainPlan tpSp = planText(kScenarios[0], cost, spec);
  EXPECT_EQ(pipelineDim(tpSp), 0);
  EXPECT_EQ(pipelineCopyBytes(tpSp, spec, 0), 64 * 256 * 4);
  // pp_ep on a 2-D tensor: both dims are split (in 4) somewhere; dim 0 in 4 blocks.
  const Text ppEp{"pp=2,ep=4", 8, "64,64", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1"};
  const ChainPlan ep = planText(ppEp, cost, spec);
  EXPECT_EQ(pipelineDim(ep), 0);
  EXPECT_EQ(pipelineBlocks(ep, 0), 4);
  EXPECT_EQ(pipelineBlocks(ep, 1), 4);
  TensorSpec out;
  EXPECT_FALSE(chunkSpec(spec, 0, 3, out).isOk());
}

TEST(PipelinedPlan, TheModelPipelinesLargeHandOffsAndNotTinyOnes) {
  Topology topology;
  ASSERT_TRUE(loadTopology("dgx-h100x8", topology).isOk());
  const TopologyCost cost(topology);
  // tp_pp, 16 MiB per stage-0 rank: ReduceScatter, shard send and AllGather overlap.
  const Text large{"pp=2,tp=4", 8, "4096,1024", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"};
  TensorSpec spec;
  const ChainPlan plan = planText(large, cost, spec);
  PipelineChoice choice;
  ASSERT_TRUE(choosePipeline(plan, spec, cost, 16, choice).isOk());
  EXPECT_EQ(choice.dim, 0);
  EXPECT_GT(choice.chunks, 1);
  EXPECT_LT(choice.pipelinedSeconds, choice.unpipelinedSeconds);
  double one = 0;
  ASSERT_TRUE(
      predictPipeline(spec, plan.trace.layouts.front(), Chain{plan.trace.ops}, plan.consumed, 0, 1, cost, one).isOk());
  EXPECT_NEAR(one, plan.fusedCost.value, 1e-12);
  // 16 KiB: fixed step costs dominate, one chunk.
  const Text tiny{"pp=2,tp=4", 8, "64,64", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"};
  const ChainPlan small = planText(tiny, cost, spec);
  ASSERT_TRUE(choosePipeline(small, spec, cost, 16, choice).isOk());
  EXPECT_EQ(choice.chunks, 1);
  // On the host's one memory bus nothing overlaps: one chunk however large.
  Topology host;
  ASSERT_TRUE(loadTopology("host", host).isOk());
  const TopologyCost hostCost(host);
  const ChainPlan onHost = planText(large, hostCost, spec);
  ASSERT_TRUE(choosePipeline(onHost, spec, hostCost, 16, choice).isOk());
  EXPECT_EQ(choice.chunks, 1);
  // A single-step plan gains nothing from chunks.
  const Text tpSp{"tp=8", 8, "4096,1024", "tp=P", "allreduce:tp", "tp=S0"};
  const ChainPlan single = planText(tpSp, cost, spec);
  ASSERT_TRUE(choosePipeline(single, spec, cost, 16, choice).isOk());
  EXPECT_EQ(choice.chunks, 1);
}

}  // namespace
}  // namespace chimera
