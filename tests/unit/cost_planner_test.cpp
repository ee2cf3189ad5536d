// SPDX-License-Identifier: Apache-2.0
// The topology model plugged into the planner: plans become the programs the model prices,
// and the planner's decision follows the model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "chimera/planning/topology_cost.hpp"

namespace chimera {
namespace {

struct ChainCase {
  Mesh mesh;
  TensorSpec spec;
  Layout from;
  Chain chain;
  Layout consume;
};

ChainCase chainCase(const char* meshText, int world, const char* from, const char* chain, const char* consume) {
  ChainCase s;
  EXPECT_TRUE(Mesh::parse(meshText, world, s.mesh).isOk());
  s.spec.shape = {4096, 1024};  // f32: 16 MiB logical tensor
  s.spec.dtype = DataType::F32;
  EXPECT_TRUE(Layout::parse(from, s.mesh, s.from).isOk());
  const Status parsed = Chain::parse(chain, s.mesh, s.chain);
  EXPECT_TRUE(parsed.isOk()) << parsed.toString();
  EXPECT_TRUE(Layout::parse(consume, s.mesh, s.consume).isOk());
  return s;
}

ChainPlan planOn(const ChainCase& s, const PlanCost& cost) {
  ChainPlan plan;
  const Status status = planChain(s.spec, s.from, s.chain, s.consume, cost, plan);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return plan;
}

TopologyCost topologyCost(const char* name) {
  Topology topology;
  EXPECT_TRUE(loadTopology(name, topology).isOk()) << name;
  return TopologyCost(topology);
}

TEST(CostPlanner, BaselineOfTpPpBecomesAllReduceInStageZeroThenStageHandOffs) {
  const ChainCase s = chainCase("pp=2,tp=4", 8, "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R");
  const ChainPlan plan = planOn(s, topologyCost("pcie-4080x8"));
  CommProgram program;
  ASSERT_TRUE(planProgram(plan.baseline, program).isOk());
  ASSERT_EQ(program.size(), 2u) << plan.baseline.toString();
  const std::uint64_t local = 4096 * 1024 * 4;  // pp=@0,tp=P: every stage-0 rank holds the full tensor
  EXPECT_EQ(program[0].kind, OpKind::AllReduce);
  EXPECT_EQ(program[0].groups, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(program[0].bytesPerRank, local);
  EXPECT_EQ(program[1].kind, OpKind::ManyToMany);
  ASSERT_EQ(program[1].transfers.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(program[1].transfers[static_cast<std::size_t>(r)].src, r);
    EXPECT_EQ(program[1].transfers[static_cast<std::size_t>(r)].dst, r + 4);
    EXPECT_EQ(program[1].transfers[static_cast<std::size_t>(r)].bytes, local);
  }
}

TEST(CostPlanner, PlanStepsCarryThePacksCopiesAndScalesTheExecutorMakes) {
  // tp=4 on a 4096x1024 f32 tensor: AllGather along dim 1 unpacks every member's column
  // block (dims before 1 are not 1); along dim 0 the blocks are contiguous.
  const ChainCase cols = chainCase("tp=4", 4, "tp=S1", "allgather:tp:1", "R");
  const ChainCase rows = chainCase("tp=4", 4, "tp=S0", "allgather:tp:0", "R");
  const TopologyCost cost = topologyCost("dgx-h100x8");
  CommProgram program;
  ASSERT_TRUE(planProgram(planOn(cols, cost).baseline, program).isOk());
  ASSERT_EQ(program.size(), 1u);
  EXPECT_EQ(program[0].localBytes, 4096u * 1024 * 4);
  EXPECT_EQ(program[0].localLaunches, 1);
  EXPECT_EQ(program[0].localRanks, 4);  // every member unpacks at once
  ASSERT_TRUE(planProgram(planOn(rows, cost).baseline, program).isOk());
  EXPECT_EQ(program[0].localBytes, 0u);
  // A slice is a local copy of the kept part; a sum over replicas a scale of the output.
  const ChainCase slice = chainCase("tp=4", 4, "R", "slice:tp:0", "tp=S0");
  ASSERT_TRUE(planProgram(planOn(slice, cost).baseline, program).isOk());
  ASSERT_EQ(program.size(), 1u);
  EXPECT_EQ(program[0].kind, OpKind::ManyToMany);
  EXPECT_TRUE(program[0].transfers.empty());
  EXPECT_EQ(program[0].localBytes, 1024u * 1024 * 4);
  const ChainCase scale = chainCase("tp=4", 4, "R", "allreduce:tp", "R");
  const ChainPlan scaled = planOn(scale, cost);
  ASSERT_TRUE(planProgram(scaled.fused, program).isOk());
  ASSERT_EQ(program.size(), 1u) << scaled.fused.toString();
  EXPECT_EQ(program[0].localBytes, 4096u * 1024 * 4);
  EXPECT_EQ(program[0].localLaunches, 1);
  // A many-to-many counts the ranks that pack or unpack. pp_sp with column shards: every
  // stage-0 rank sends its whole shard (one run) to every stage-1 rank, and only the 4
  // stage-1 ranks unpack the 4 column blocks of the whole tensor.
  const ChainCase handOff = chainCase("sp=4,pp=2", 8, "pp=@0,sp=S1", "allgather:sp:1,send:pp", "pp=@1,sp=R");
  ASSERT_TRUE(planProgram(planOn(handOff, cost).fused, program).isOk());
  ASSERT_EQ(program.size(), 1u);
  EXPECT_EQ(program[0].kind, OpKind::ManyToMany);
  EXPECT_EQ(program[0].localRanks, 4);
  EXPECT_EQ(program[0].localBytes, 4096u * 1024 * 4);
}

TEST(CostPlanner, PlannerDecisionFollowsTheModelAndShowsItsPredictions) {
  const ChainCase s = chainCase("pp=2,tp=4", 8, "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R");
  const TopologyCost cost = topologyCost("pcie-4080x8");
  const ChainPlan plan = planOn(s, cost);
  EXPECT_TRUE(plan.useFused) << plan.explain;
  CommProgram baseline;
  ASSERT_TRUE(planProgram(plan.baseline, baseline).isOk());
  double seconds = 0;
  ASSERT_TRUE(cost.model().predict(baseline, seconds).isOk());
  EXPECT_DOUBLE_EQ(plan.baselineCost.value, seconds);
  EXPECT_LT(plan.fusedCost.value, plan.baselineCost.value);
  EXPECT_EQ(plan.baselineCost.summary, formatSeconds(seconds) + " on pcie-4080x8");
  EXPECT_EQ(cost.name(), "pcie-4080x8");
}

// A fused plan is taken only when it saves more than the topology's fusion margin of the
// chain's predicted time: the margin is set just below and just above the gain the model
// predicts for the hand-off, and a Session's decision (fusionPays) follows the same rule.
TEST(CostPlanner, FusionNeedsAPredictedGainBeyondTheMargin) {
  const ChainCase s = chainCase("pp=4,tp=2", 8, "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R");
  Topology host;
  ASSERT_TRUE(loadTopology("host", host).isOk());
  EXPECT_EQ(host.fusionMargin, 0.10);
  const auto withMargin = [&](double margin) {
    Topology t = host;
    t.fusionMargin = margin;
    return TopologyCost(t);
  };
  const ChainPlan any = planOn(s, withMargin(0));
  ASSERT_TRUE(any.useFused) << any.explain;
  const double gain = 1 - any.fusedCost.value / any.baselineCost.value;
  ASSERT_GT(gain, 0.01);

  const TopologyCost below = withMargin(gain * 0.99);
  const ChainPlan taken = planOn(s, below);
  EXPECT_TRUE(taken.useFused) << taken.explain;
  EXPECT_TRUE(fusionPays(taken.fused, taken.baseline, below));

  const TopologyCost above = withMargin(gain * 1.01);
  const ChainPlan kept = planOn(s, above);
  EXPECT_FALSE(kept.useFused) << kept.explain;
  EXPECT_FALSE(fusionPays(kept.fused, kept.baseline, above));
  EXPECT_NE(kept.explain.find(fmt::format("predicted gain of {:.1f}% is within the cost's margin", 100 * gain)),
            std::string::npos)
      << kept.explain;
  // The best plan found is the same either way; only the decision moves.
  EXPECT_EQ(kept.fused.toString(), taken.fused.toString());

  EXPECT_EQ(BytesCost().fusionMargin(), 0);
  EXPECT_EQ(topologyCost("pcie-4080x8").fusionMargin(), 0);
}

TEST(CostPlanner, FusionMarginOutsideZeroToOneIsAnError) {
  const ChainCase s = chainCase("pp=4,tp=2", 8, "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R");
  for (const double margin : {-0.1, 1.0, 2.0}) {
    Topology host;
    ASSERT_TRUE(loadTopology("host", host).isOk());
    host.fusionMargin = margin;
    ChainPlan plan;
    const Status status = planChain(s.spec, s.from, s.chain, s.consume, TopologyCost(host), plan);
    ASSERT_EQ(status.code(), StatusCode::InvalidArgument) << margin;
    EXPECT_NE(status.message().find("fusion_margin must be in [0, 1)"), std::string::npos) << status.message();
  }
}

// The six scenario presets of chimera-bench (mesh, from, chain, consume).
struct PaperScenario {
  const char* name;
  const char* mesh;
  const char* from;
  const char* chain;
  const char* consume;
};
constexpr PaperScenario kPaperScenarios[] = {
    {"tp_sp", "tp=8", "tp=P", "allreduce:tp", "tp=S0"},
    {"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"},
    {"tp_ep", "ep=2,tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1"},
    {"sp_ep", "dp=2,sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2"},
    {"pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R"},
    {"pp_ep", "pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1"},
};

TEST(CostPlanner, PlannerFusesAllSixPaperScenariosOnThePcieNode) {
  const TopologyCost cost = topologyCost("pcie-4080x8");
  for (const PaperScenario& p : kPaperScenarios) {
    ChainCase s = chainCase(p.mesh, 8, p.from, p.chain, p.consume);
    s.spec.shape = {64, 64, 1024};  // f32, 16 MiB logical; every split in the table divides it
    const ChainPlan plan = planOn(s, cost);
    EXPECT_TRUE(plan.useFused) << p.name << ": " << plan.explain;
    EXPECT_LT(plan.fusedCost.value, plan.baselineCost.value) << p.name;
  }
}

// Most distinct peers any rank sends to in one step of `program`.
std::size_t maxFanOut(const CommProgram& program) {
  std::size_t most = 0;
  for (const CommStep& step : program) {
    for (const Transfer& t : step.transfers) {
      std::vector<int> peers;
      for (const Transfer& u : step.transfers) {
        if (u.src == t.src && u.dst != u.src && std::find(peers.begin(), peers.end(), u.dst) == peers.end()) {
          peers.push_back(u.dst);
        }
      }
      most = std::max(most, peers.size());
    }
  }
  return most;
}

TEST(CostPlanner, OnH20ThePlannerAvoidsTheFanOutThatTheH100ModelPrefers) {
  const PaperScenario& ppSp = kPaperScenarios[4];
  ASSERT_STREQ(ppSp.name, "pp_sp");
  ChainCase s = chainCase(ppSp.mesh, 8, ppSp.from, ppSp.chain, ppSp.consume);
  s.spec.shape = {64, 64, 4096};  // 16 MiB per stage-0 rank
  CommProgram onH100;
  CommProgram onH20;
  ASSERT_TRUE(planProgram(planOn(s, topologyCost("dgx-h100x8")).fused, onH100).isOk());
  ASSERT_TRUE(planProgram(planOn(s, topologyCost("nvswitch-h20x8")).fused, onH20).isOk());
  EXPECT_EQ(maxFanOut(onH100), 4u);  // each source shard straight to the 4 receivers
  EXPECT_EQ(maxFanOut(onH20), 1u);   // 1:1 hand-offs, then a ring AllGather in stage 1
}

TEST(CostPlanner, MeshLargerThanTheTopologyIsAnErrorNamingBothCounts) {
  const ChainCase s = chainCase("pp=2,tp=8", 16, "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R");
  ChainPlan plan;
  Status status = planChain(s.spec, s.from, s.chain, s.consume, topologyCost("pcie-4080x8"), plan);
  ASSERT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("has 16 ranks but topology 'pcie-4080x8' has 8 GPUs"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("multinode-ib:2"), std::string::npos) << status.message();
  // A multi-node topology that covers the mesh prices it; one that does not is an error too.
  EXPECT_TRUE(planChain(s.spec, s.from, s.chain, s.consume, topologyCost("multinode-ib:2"), plan).isOk());
  EXPECT_TRUE(std::isfinite(plan.fusedCost.value));
  const ChainCase big = chainCase("pp=4,tp=8", 32, "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R");
  status = planChain(big.spec, big.from, big.chain, big.consume, topologyCost("multinode-ib"), plan);
  ASSERT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("has 32 ranks but topology 'multinode-ib:2' has 16 GPUs"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("multinode-ib:4"), std::string::npos) << status.message();
  // Redistributions are checked the same way.
  Plan out;
  status = planRedistribution(s.spec, s.from, s.consume, 1, topologyCost("dgx-h100x8"), out);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
}

}  // namespace
}  // namespace chimera
