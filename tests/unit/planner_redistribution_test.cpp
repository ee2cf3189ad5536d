// SPDX-License-Identifier: Apache-2.0
// planRedistribution on its own: source layout -> target layout, also across pipeline
// stages. Without reductions the expected output is the target layout's own placement of
// the same logical tensor, so the simulator's distribute() is the oracle.
#include <gtest/gtest.h>

#include "chimera/planning/planner.hpp"
#include "sim/simulator.hpp"

namespace chimera {
namespace {

struct Scene {
  Mesh mesh;
  TensorSpec spec;
  Scene(const char* meshText, int world, std::vector<std::int64_t> shape) : spec{std::move(shape), DataType::BF16} {
    EXPECT_TRUE(Mesh::parse(meshText, world, mesh).isOk());
  }
  Layout layout(const char* text) const {
    Layout l;
    EXPECT_TRUE(Layout::parse(text, mesh, l).isOk()) << text;
    return l;
  }
  Plan plan(const char* from, const char* to) const {
    Plan p;
    const Status s = planRedistribution(spec, layout(from), layout(to), 1, BytesCost(), p);
    EXPECT_TRUE(s.isOk()) << s.toString();
    return p;
  }
  // Runs the plan on the simulator and compares with the target's own placement.
  void expectDelivers(const char* from, const char* to) const {
    const Plan p = plan(from, to);
    sim::Traffic traffic;
    EXPECT_EQ(sim::runPlan(p, sim::distribute(layout(from), spec, 11), traffic), sim::distribute(layout(to), spec, 11))
        << from << " -> " << to << "\n"
        << p.toString();
    EXPECT_EQ(traffic.perRank, planBytes(p).perRank);
  }
};

TEST(PlannerRedistribution, AcrossStagesWithADifferentSplit) {
  Scene s("pp=2,tp=4", 8, {8, 8});
  const Plan p = s.plan("pp=@0,tp=S0", "pp=@1,tp=S1");
  ASSERT_EQ(p.steps.size(), 1u);
  ASSERT_EQ(p.steps[0].kind, PlanStep::Kind::ManyToMany);
  // Each stage-1 rank needs a 8x2 column block: a 2x2 piece from each of the 4 row blocks.
  EXPECT_EQ(p.steps[0].transfers.size(), 16u);
  for (const auto& t : p.steps[0].transfers) {
    EXPECT_LT(t.src, 4);
    EXPECT_GE(t.dst, 4);
    EXPECT_EQ(t.bytes, 2 * 2 * 2);
    EXPECT_EQ(t.srcBox.extent, (std::vector<std::int64_t>{2, 2}));
  }
  EXPECT_TRUE(p.steps[0].allToAllGroup.empty());  // different holders on each side
  s.expectDelivers("pp=@0,tp=S0", "pp=@1,tp=S1");
}

TEST(PlannerRedistribution, ManyLayoutPairsDeliverExactly) {
  Scene s("dp=2,pp=2,tp=2", 8, {8, 4, 4});
  const char* layouts[] = {"R",           "pp=@0",       "pp=@1,tp=S1",    "dp+tp=S0",         "tp+dp=S0",
                           "dp=S2,tp=S0", "pp=@0,dp=S1", "pp=@1,dp+tp=S2", "dp=S0,pp=@1,tp=S0"};
  for (const char* from : layouts) {
    for (const char* to : layouts) s.expectDelivers(from, to);
  }
}

TEST(PlannerRedistribution, PinnedPartialAxesMoveWithinTheirCoordinate) {
  Scene s("dp=2,tp=4", 8, {8, 8});
  const Plan p = s.plan("dp=P,tp=S0", "dp=P,tp=S1");
  for (const auto& step : p.steps) {
    for (const auto& t : step.transfers) EXPECT_EQ(t.src / 4, t.dst / 4) << "dp coordinate changed";
  }
  s.expectDelivers("dp=P,tp=S0", "dp=P,tp=S1");
}

TEST(PlannerRedistribution, AllToAllShapedManyToManyIsMarked) {
  Scene s("dp=2,sp=4", 8, {8, 8, 8});
  const Plan p = s.plan("dp=S0,sp=S1", "dp+sp=S2");
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].allToAllGroup, AxisSet::fromBits(3));
  s.expectDelivers("dp=S0,sp=S1", "dp+sp=S2");
}

TEST(PlannerRedistribution, RejectsUnreachableTargets) {
  Scene s("pp=2,tp=4", 8, {8, 8});
  Plan p;
  Status st = planRedistribution(s.spec, s.layout("tp=S0"), s.layout("tp=P"), 1, BytesCost(), p);
  EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
  EXPECT_NE(st.message().find("cannot be produced"), std::string::npos) << st.message();
  st = planRedistribution(s.spec, s.layout("tp=P"), s.layout("tp=P(max)"), 1, BytesCost(), p);
  EXPECT_FALSE(st.isOk());
  st = planRedistribution(s.spec, s.layout("tp=S0"), s.layout("tp=S1"), 0, BytesCost(), p);
  EXPECT_NE(st.message().find("scale 0"), std::string::npos);
  st = planRedistribution(TensorSpec{{6, 8}, DataType::F32}, s.layout("tp=S0"), s.layout("R"), 1, BytesCost(), p);
  EXPECT_NE(st.message().find("not divisible"), std::string::npos);
  Mesh other;
  ASSERT_TRUE(Mesh::parse("tp=8", 8, other).isOk());
  Layout otherLayout;
  ASSERT_TRUE(Layout::parse("tp=S0", other, otherLayout).isOk());
  st = planRedistribution(s.spec, s.layout("tp=S0"), otherLayout, 1, BytesCost(), p);
  EXPECT_NE(st.message().find("different meshes"), std::string::npos);
}

TEST(PlannerRedistribution, BytesCostCountsTotalThenBusiestRank) {
  Scene s("tp=4", 4, {8, 8});
  const Plan p = s.plan("tp=S0", "R");  // AllGather of a 2x8 bf16 shard: 3 * 32 B per rank
  ASSERT_EQ(p.steps.size(), 1u);
  EXPECT_EQ(p.steps[0].kind, PlanStep::Kind::AllGather);
  const CostPrediction c = BytesCost().predict(p);
  EXPECT_EQ(c.value, 4 * 96);
  EXPECT_EQ(c.tieBreak, 96);
}

}  // namespace
}  // namespace chimera
