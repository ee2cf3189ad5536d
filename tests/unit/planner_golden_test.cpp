// SPDX-License-Identifier: Apache-2.0
// Golden tests: the six fusion rules of the paper and the named rewrites, with byte
// counts computed by hand from the formulas (L = local bytes before an op, n = group
// size): AllReduce 2(n-1)/n*L, ReduceScatter (n-1)/n*L, AllGather (n-1)*L, AllToAll
// (n-1)/n*L, send L. Every scenario holds 16 MiB per rank at the chain's start (f32), and
// each scenario is also run on the simulator (at a shrunk size) against the chain.
#include <gtest/gtest.h>

#include "chimera/planning/planner.hpp"
#include "chimera/planning/redundancy.hpp"
#include "planner/patterns/patterns.hpp"
#include "sim/simulator.hpp"

namespace chimera {
namespace {

constexpr std::int64_t kMiB = 1 << 20;

struct Scenario {
  const char* mesh;
  const char* shape;
  const char* from;
  const char* chain;
  const char* consume;
};

ChainPlan planWithSpec(const Scenario& s, const TensorSpec& spec, const PlanCost& cost) {
  Mesh mesh;
  EXPECT_TRUE(Mesh::parse(s.mesh, mesh).isOk());
  Layout from;
  EXPECT_TRUE(Layout::parse(s.from, mesh, from).isOk());
  Chain chain;
  EXPECT_TRUE(Chain::parse(s.chain, mesh, chain).isOk());
  std::optional<Layout> consume;
  if (s.consume != nullptr) {
    Layout layout;
    EXPECT_TRUE(Layout::parse(s.consume, mesh, layout).isOk());
    consume = layout;
  }
  ChainPlan plan;
  const Status status = planChain(spec, from, chain, consume, cost, plan);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return plan;
}

// Plans the scenario at full size (for the byte counts) and checks the same scenario on
// the simulator at a size shrunk by up to 64x per dim (every dim stays a multiple of 8).
ChainPlan planOf(const Scenario& s, const PlanCost& cost = BytesCost()) {
  TensorSpec spec;
  EXPECT_TRUE(TensorSpec::parseShape(s.shape, spec.shape).isOk());
  spec.dtype = DataType::F32;
  ChainPlan plan = planWithSpec(s, spec, cost);
  TensorSpec small = spec;
  for (auto& extent : small.shape) {
    std::int64_t factor = 64;
    while (factor > 1 && (extent % factor != 0 || (extent / factor) % 8 != 0)) factor /= 2;
    extent /= factor;
  }
  const ChainPlan smallPlan = planWithSpec(s, small, cost);
  EXPECT_EQ(planBytes(smallPlan.fused).stepPerRank.size(), plan.fused.steps.size());
  const auto input = sim::distribute(smallPlan.trace.layouts.front(), small, 7);
  sim::Traffic chainTraffic, fusedTraffic;
  const auto final = sim::runChain(smallPlan.trace, small, input, chainTraffic);
  EXPECT_EQ(sim::runPlan(smallPlan.fused, input, fusedTraffic),
            sim::consume(final, smallPlan.trace.final(), smallPlan.consumed, small));
  EXPECT_EQ(chainTraffic.total(), smallPlan.baselineBytes.total);
  EXPECT_EQ(fusedTraffic.total(), smallPlan.fusedBytes.total);
  return plan;
}

std::vector<PlanStep::Kind> kinds(const Plan& plan) {
  std::vector<PlanStep::Kind> out;
  for (const auto& s : plan.steps) out.push_back(s.kind);
  return out;
}

using K = PlanStep::Kind;

TEST(PlannerGolden, TpSpHalvesTheBytes) {
  // tp=8: AllReduce 2*7/8*16 = 28 MiB per rank; ReduceScatter 7/8*16 = 14 MiB.
  const auto p = planOf({"tp=8", "4096,1024", "tp=P", "allreduce:tp", "tp=S0"});
  EXPECT_EQ(p.baselineBytes.maxPerRank, 28 * kMiB);
  EXPECT_EQ(p.baselineBytes.total, 8 * 28 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 14 * kMiB);
  EXPECT_EQ(p.fusedBytes.total, 8 * 14 * kMiB);
  EXPECT_EQ(kinds(p.fused), std::vector<K>{K::ReduceScatter});
  EXPECT_TRUE(p.useFused);
}

TEST(PlannerGolden, TpPpGoesFromTenToSevenLocalTensors) {
  // L = 16 MiB. Baseline: AllReduce 4 * 1.5L + send 4L = 10L. Fused: ReduceScatter 4 * 0.75L,
  // 1/4 shards across the stage link 4 * 0.25L, AllGather on stage 1 4 * 0.75L = 7L.
  const auto p = planOf({"pp=2,tp=4", "4096,1024", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"});
  EXPECT_EQ(p.baselineBytes.total, 10 * 16 * kMiB);
  EXPECT_EQ(p.baselineBytes.maxPerRank, 40 * kMiB);
  EXPECT_EQ(p.fusedBytes.total, 7 * 16 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 16 * kMiB);
  EXPECT_EQ(kinds(p.fused), (std::vector<K>{K::ReduceScatter, K::Send, K::AllGather}));
}

TEST(PlannerGolden, TpPpBackwardMirrorsTheForwardHandOff) {
  // The backward pass: the input gradient reduced over tp on stage 1, sent back to stage 0.
  const auto p = planOf({"pp=2,tp=4", "4096,1024", "pp=@1,tp=P", "allreduce:tp,send:pp:backward", "pp=@0,tp=R"});
  EXPECT_EQ(p.baselineBytes.total, 10 * 16 * kMiB);
  EXPECT_EQ(p.fusedBytes.total, 7 * 16 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 16 * kMiB);
  EXPECT_TRUE(p.useFused);
  EXPECT_EQ(kinds(p.fused), (std::vector<K>{K::ReduceScatter, K::Send, K::AllGather}));
}

TEST(PlannerGolden, TpEpReducesScattersThenSmallerAllToAll) {
  // L = 16 MiB. Baseline: AllReduce 24 MiB + AllToAll on 4 MiB 3.5 MiB = 27.5 MiB per rank.
  // Fused: ReduceScatter 12 MiB + the same AllToAll 3.5 MiB = 15.5 MiB per rank.
  const auto p =
      planOf({"ep=2,tp=4", "8192,1024", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1"});
  EXPECT_EQ(p.baselineBytes.total, 8 * (24 * kMiB + 7 * kMiB / 2));
  EXPECT_EQ(p.fusedBytes.total, 8 * (12 * kMiB + 7 * kMiB / 2));
  EXPECT_EQ(p.fusedBytes.maxPerRank, 12 * kMiB + 7 * kMiB / 2);
  EXPECT_EQ(kinds(p.fused), (std::vector<K>{K::ReduceScatter, K::AllToAll}));
}

TEST(PlannerGolden, SpEpBecomesOneAllToAllOverTheUnionGroup) {
  // L = 16 MiB. Baseline: AllGather(sp) 3L + AllToAll(dp+sp) 7/8 L = 62 MiB per rank.
  // Fused: every pair of the 8 ranks exchanges L/8: 7/8 L = 14 MiB per rank.
  const auto p =
      planOf({"dp=2,sp=4", "256,1024,128", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2"});
  EXPECT_EQ(p.baselineBytes.maxPerRank, 62 * kMiB);
  EXPECT_EQ(p.baselineBytes.total, 8 * 62 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 14 * kMiB);
  EXPECT_EQ(p.fusedBytes.total, 8 * 14 * kMiB);
  ASSERT_EQ(kinds(p.fused), std::vector<K>{K::ManyToMany});
  // The transfers form an AllToAll over dp+sp: one equal block per ordered pair.
  const auto& m2m = p.fused.steps[0];
  EXPECT_EQ(m2m.allToAllGroup, AxisSet::fromBits(3));
  int remote = 0;
  for (const auto& t : m2m.transfers) {
    if (t.src == t.dst) continue;
    ++remote;
    EXPECT_EQ(t.bytes, 2 * kMiB);
  }
  EXPECT_EQ(remote, 8 * 7);
}

TEST(PlannerGolden, PpSpSendsShardsAcrossThenGathers) {
  // L = 16 MiB shard. Baseline: AllGather 3L + send 4L = 112 MiB on the busiest rank,
  // 4*3L + 4*4L = 28L in total. Fused: each shard crosses once (4L) and stage 1 gathers (12L).
  const auto p = planOf({"sp=4,pp=2", "4096,4096", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R"});
  EXPECT_EQ(p.baselineBytes.maxPerRank, 112 * kMiB);
  EXPECT_EQ(p.baselineBytes.total, 28 * 16 * kMiB);
  EXPECT_EQ(p.fusedBytes.total, 16 * 16 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 48 * kMiB);
  EXPECT_EQ(kinds(p.fused), (std::vector<K>{K::Send, K::AllGather}));
}

TEST(PlannerGolden, PpSpWithShardedConsumerSendsEachShardOnce) {
  // The simulator's variant of PP+SP (receivers read M/R): 7L -> L, the paper's 7x.
  const auto p = planOf({"sp=4,pp=2", "4096,4096", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=S0"});
  EXPECT_EQ(p.baselineBytes.maxPerRank, 112 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 16 * kMiB);
  EXPECT_EQ(kinds(p.fused), std::vector<K>{K::Send});
}

TEST(PlannerGolden, PpEpSendsEachChunkStraightToItsExpert) {
  // L = 16 MiB. Baseline: send 4L + AllToAll on stage 1 4 * 3/4 L = 7L. Fused: every stage-1
  // rank receives its column block from the 4 stage-0 ranks: 4L.
  const auto p = planOf({"pp=2,ep=4", "4096,4096", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1"});
  EXPECT_EQ(p.baselineBytes.total, 7 * 16 * kMiB);
  EXPECT_EQ(p.fusedBytes.total, 4 * 16 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 16 * kMiB);
  EXPECT_EQ(kinds(p.fused), std::vector<K>{K::ManyToMany});
  EXPECT_EQ(p.fused.steps[0].transfers.size(), 16u);
}

TEST(PlannerRewrite, AllGatherThenOwnSliceIsLocal) {
  const auto p = planOf({"tp=4", "4096,1024", "tp=S0", "allgather:tp:0,slice:tp:0", nullptr});
  EXPECT_EQ(p.baselineBytes.maxPerRank, 12 * kMiB);  // AllGather of a 4 MiB shard: 3 * 4 MiB
  EXPECT_EQ(p.fusedBytes.total, 0);
  EXPECT_EQ(kinds(p.fused), std::vector<K>{K::LocalCopy});
  ASSERT_FALSE(p.rewrites.empty());
  EXPECT_NE(p.rewrites[0].find("local"), std::string::npos);
}

TEST(PlannerRewrite, AllGatherThenOtherSliceIsAllToAll) {
  // Shard 4 MiB: AllGather 12 MiB per rank; AllToAll 3/4 * 4 = 3 MiB per rank.
  const auto p = planOf({"sp=4", "4096,1024", "sp=S0", "allgather:sp:0,slice:sp:1", nullptr});
  EXPECT_EQ(p.baselineBytes.maxPerRank, 12 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 3 * kMiB);
  ASSERT_EQ(kinds(p.fused), std::vector<K>{K::AllToAll});
  EXPECT_EQ(p.fused.steps[0].dim, 0);
  EXPECT_EQ(p.fused.steps[0].toDim, 1);
}

TEST(PlannerRewrite, ReduceScatterThenAllGatherIsAllReduce) {
  const auto p = planOf({"tp=4", "4096,1024", "tp=P", "reducescatter:tp:0,allgather:tp:0", nullptr});
  EXPECT_EQ(p.fusedBytes.total, p.baselineBytes.total);
  EXPECT_EQ(kinds(p.fused), std::vector<K>{K::AllReduce});
  EXPECT_TRUE(p.useFused);  // same bytes, one step fewer
}

TEST(PlannerRewrite, TwoAllReducesMergeIntoOneOverTheUnion) {
  // L = 16 MiB: 24 + 16 = 40 MiB per rank vs 2 * 7/8 * 16 = 28 MiB.
  const auto p = planOf({"dp=2,tp=4", "4096,1024", "dp=P,tp=P", "allreduce:tp,allreduce:dp", nullptr});
  EXPECT_EQ(p.baselineBytes.maxPerRank, 40 * kMiB);
  EXPECT_EQ(p.fusedBytes.maxPerRank, 28 * kMiB);
  ASSERT_EQ(kinds(p.fused), std::vector<K>{K::AllReduce});
  EXPECT_EQ(p.fused.steps[0].axes, AxisSet::fromBits(3));
}

// A cost that makes the dp links (and many-to-many steps, which may cross them) 10x slower
// than the tp links: the hierarchical form wins.
class SlowDpCost final : public PlanCost {
 public:
  std::string_view name() const override { return "slow-dp"; }
  CostPrediction predict(const Plan& plan) const override {
    const PlanBytes bytes = planBytes(plan);
    double time = 0;
    for (std::size_t s = 0; s < plan.steps.size(); ++s) {
      const auto& perRank = bytes.stepPerRank[s];
      const double busiest = static_cast<double>(*std::max_element(perRank.begin(), perRank.end()));
      // A many-to-many has no axes; its transfers may cross dp, so it is priced as slow.
      const bool slow = plan.steps[s].axes.contains(0) || plan.steps[s].kind == PlanStep::Kind::ManyToMany;
      time += busiest * (slow ? 10.0 : 1.0);
    }
    return {time, 0, "weighted bytes"};
  }
};

TEST(PlannerRewrite, HierarchicalAllReduceWhenTheCostModelSaysSo) {
  const auto p = planOf({"dp=2,tp=4", "4096,1024", "dp=P,tp=P", "allreduce:tp,allreduce:dp", nullptr}, SlowDpCost());
  ASSERT_EQ(kinds(p.fused), (std::vector<K>{K::ReduceScatter, K::AllReduce, K::AllGather}));
  EXPECT_EQ(p.fused.steps[0].axes, AxisSet::single(1));  // tp first, on the fast links
  EXPECT_EQ(p.fused.steps[1].axes, AxisSet::single(0));  // dp on a quarter of the data
  EXPECT_EQ(p.fusedBytes.maxPerRank, 28 * kMiB);         // same bytes as the flat form
}

TEST(PlannerRewrite, AllReduceOfReplicatedIsALocalScale) {
  const auto p = planOf({"tp=4", "4096,1024", "tp=R", "allreduce:tp", nullptr});
  EXPECT_EQ(p.fusedBytes.total, 0);
  ASSERT_EQ(kinds(p.fused), std::vector<K>{K::Scale});
  EXPECT_EQ(p.fused.steps[0].scale, 4);
}

TEST(PlannerRedundancy, UnconsumedBytesOfEachOp) {
  // TP+SP: of the AllReduce's 2(n-1)L per group, the (n-1)L AllGather half is never read.
  const auto tpSp = planOf({"tp=8", "4096,1024", "tp=P", "allreduce:tp", "tp=S0"});
  ChainAnalysis a;
  ASSERT_TRUE(analyzeChain(tpSp.trace, tpSp.consumed, tpSp.fused.spec, a).isOk());
  EXPECT_EQ(a.ops[0].unconsumedTotal, 7 * 16 * kMiB);
  // AllGather then own slice: everything the AllGather delivers is dropped.
  const auto own = planOf({"tp=4", "4096,1024", "tp=S0", "allgather:tp:0,slice:tp:0", nullptr});
  ASSERT_TRUE(analyzeChain(own.trace, own.consumed, own.fused.spec, a).isOk());
  EXPECT_EQ(a.ops[0].unconsumedTotal, a.ops[0].bytesTotal);
  EXPECT_EQ(a.ops[0].bytesTotal, 4 * 12 * kMiB);
  // SP+EP: 3/4 of what the AllGather delivers is sliced away.
  const auto spEp =
      planOf({"dp=2,sp=4", "256,1024,128", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2"});
  ASSERT_TRUE(analyzeChain(spEp.trace, spEp.consumed, spEp.fused.spec, a).isOk());
  EXPECT_EQ(a.ops[0].unconsumedTotal, 8 * 36 * kMiB);
  EXPECT_EQ(a.ops[2].unconsumedTotal, 0);
  // A fully consumed chain has nothing unconsumed.
  const auto tpPp = planOf({"pp=2,tp=4", "4096,1024", "pp=@0,tp=P", "allreduce:tp,send:pp", nullptr});
  ASSERT_TRUE(analyzeChain(tpPp.trace, tpPp.consumed, tpPp.fused.spec, a).isOk());
  EXPECT_EQ(a.unconsumedTotal, 0);
}

}  // namespace
}  // namespace chimera

namespace chimera {
namespace {

bool names(const ChainPlan& p, const char* fragment) {
  for (const auto& r : p.rewrites) {
    if (r.find(fragment) != std::string::npos) return true;
  }
  return false;
}

TEST(PlannerRewrite, ExplainNamesTheRewritesEachScenarioEmbodies) {
  EXPECT_TRUE(names(planOf({"tp=8", "4096,1024", "tp=P", "allreduce:tp,slice:tp:0", nullptr}),
                    "allreduce:tp then own shard -> reducescatter:tp:0"));
  EXPECT_TRUE(names(planOf({"pp=2,tp=4", "4096,1024", "pp=@0,tp=P", "allreduce:tp,send:pp", nullptr}),
                    "stage hand-off carries 16777216 B instead of 67108864 B"));
  EXPECT_TRUE(names(
      planOf({"dp=2,sp=4", "256,1024,128", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2"}),
      "2 communicating ops reshard through one alltoall over dp+sp"));
  EXPECT_TRUE(names(planOf({"sp=4", "4096,1024", "sp=S0", "allgather:sp:0,slice:sp:1", nullptr}),
                    "allgather:sp:0 then slice:sp:1 -> alltoall:sp:0:1"));
  EXPECT_TRUE(names(planOf({"tp=4", "4096,1024", "tp=P", "reducescatter:tp:0,allgather:tp:0", nullptr}),
                    "reducescatter:tp:0 then allgather:tp:0 -> allreduce:tp"));
  EXPECT_TRUE(names(planOf({"dp=2,tp=4", "4096,1024", "dp=P,tp=P", "allreduce:tp,allreduce:dp", nullptr}),
                    "allreduce:tp then allreduce:dp -> allreduce:dp+tp"));
  EXPECT_TRUE(names(planOf({"dp=2,tp=4", "4096,1024", "dp=P,tp=P", "allreduce:tp,allreduce:dp", nullptr}, SlowDpCost()),
                    "-> hierarchical"));
  EXPECT_TRUE(names(planOf({"tp=4", "4096,1024", "tp=R", "allreduce:tp", nullptr}), "local scale x4"));
  // A chain with nothing to rewrite names nothing.
  EXPECT_TRUE(planOf({"tp=4", "4096,1024", "tp=P", "allreduce:tp", nullptr}).rewrites.empty());
}

}  // namespace
}  // namespace chimera
