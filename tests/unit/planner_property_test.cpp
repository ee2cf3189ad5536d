// SPDX-License-Identifier: Apache-2.0
// Property tests of the planner against the N-rank simulator: random meshes (1-3 axes,
// sizes 1-8, at most 64 ranks), random valid layouts, shapes, dtypes and chains of 1-5
// ops built by applying random ops whose preconditions hold. For every case the fused
// plan and the baseline plan must deliver exactly the consumed data of the chain run op
// by op, the fused plan must never send more bytes than the chain, the planner's byte
// counts must match the simulator's, and planning twice must give the identical plan.
// Fixed seeds: a failure names its seed and reproduces.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <random>
#include <vector>

#include "chimera/planning/planner.hpp"
#include "chimera/planning/redundancy.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "core/type_lists.hpp"
#include "sim/simulator.hpp"

namespace chimera {
namespace {

constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

struct Case {
  Mesh mesh;
  TensorSpec spec;
  Layout from;
  Chain chain;
  std::optional<Layout> consume;
  std::string describe() const {
    return fmt::format("mesh {} shape {} from {} chain {} consume {}", mesh.toString(), spec.toString(),
                       from.toString(), chain.toString(mesh), consume ? consume->toString() : "(final)");
  }
};

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }

  Mesh mesh() {
    while (true) {
      std::vector<MeshAxis> axes;
      const int count = uniform(1, 3);
      int world = 1;
      for (int i = 0; i < count; ++i) {
        axes.push_back({fmt::format("a{}", i), uniform(1, 8)});
        world *= axes.back().size;
      }
      if (world > 64) continue;
      Mesh mesh;
      if (Mesh::create(axes, world, mesh).isOk()) return mesh;
    }
  }

  // Shapes of at most 8192 elements keep thousands of simulated cases within seconds.
  TensorSpec spec(const Mesh& mesh) {
    while (true) {
      TensorSpec spec = anySpec(mesh);
      if (spec.numElements() <= 8192) return spec;
    }
  }

  TensorSpec anySpec(const Mesh& mesh) {
    TensorSpec spec;
    spec.dtype = kAllDataTypes[uniform(0, 6)];
    const int rank = uniform(1, 3);
    for (int d = 0; d < rank; ++d) {
      std::int64_t extent = uniform(1, 2);
      for (const auto& axis : mesh.axes()) {
        if (coin(0.6)) extent *= axis.size;
      }
      spec.shape.push_back(extent);
    }
    return spec;
  }

  Layout layout(const Mesh& mesh, const TensorSpec& spec) {
    Layout layout = Layout::replicated(mesh);
    const ReduceOp op = kOps[uniform(0, 2)];
    for (int axis = 0; axis < mesh.numAxes(); ++axis) {
      const int pick = uniform(0, 9);
      Layout next = layout;
      if (pick < 3) continue;
      if (pick < 6)
        next = layout.with(axis, Placement::shard(uniform(0, spec.rank() - 1)));
      else if (pick < 8)
        next = layout.with(axis, Placement::partial(op));
      else
        next = layout.with(axis, Placement::onStage(uniform(0, mesh.axis(axis).size - 1)));
      if (next.validate(spec).isOk()) layout = next;
    }
    return layout;
  }

  ChainOp op(const Mesh& mesh, const TensorSpec& spec) {
    ChainOp op;
    std::vector<ChainOp::Kind> kinds;  // the chain's kinds, from the one list
    for (const OpKindInfo& info : kOpKinds) {
      if (opKindUsedIn(info.kind, kOpInChain)) kinds.push_back(info.kind);
    }
    op.kind = kinds[static_cast<std::size_t>(uniform(0, static_cast<int>(kinds.size()) - 1))];
    const std::uint32_t all = mesh.allAxes().bits();
    op.axes = AxisSet::fromBits(static_cast<std::uint32_t>(uniform(1, static_cast<int>(all))));
    op.dim = uniform(0, spec.rank() - 1);
    op.toDim = uniform(0, spec.rank() - 1);
    op.root = uniform(0, mesh.groupSize(op.axes) - 1);
    if (op.kind == ChainOp::Kind::Send && coin(0.5)) op.stageStep = -1;
    return op;
  }

  std::optional<Case> chainCase() {
    Case c;
    c.mesh = mesh();
    c.spec = spec(c.mesh);
    c.from = layout(c.mesh, c.spec);
    Layout current = c.from;
    const int length = uniform(1, 5);
    for (int attempt = 0; attempt < 60 && static_cast<int>(c.chain.ops.size()) < length; ++attempt) {
      const ChainOp candidate = op(c.mesh, c.spec);
      OpEffect effect;
      if (!applyChainOp(current, candidate, c.spec, effect).isOk()) continue;
      c.chain.ops.push_back(candidate);
      current = effect.output;
    }
    if (c.chain.ops.empty()) return std::nullopt;
    if (coin(0.4)) {
      // Consume a local sub-slice of the final layout: slice some of its R axes.
      Layout consumed = current;
      for (int axis = 0; axis < c.mesh.numAxes(); ++axis) {
        if (!consumed.placement(axis).isReplicate() || coin(0.5)) continue;
        Layout next = consumed.withShards(AxisSet::single(axis), uniform(0, c.spec.rank() - 1));
        if (next.validate(c.spec).isOk()) consumed = next;
      }
      c.consume = consumed;
    }
    return c;
  }

 private:
  std::mt19937_64 rng_;
};

struct Stats {
  int cases = 0;
  int fusedCheaper = 0;
  int manyToMany = 0;
};

void checkCase(const Case& c, std::uint64_t seed, Stats& stats) {
  SCOPED_TRACE(fmt::format("seed {}: {}", seed, c.describe()));
  const BytesCost cost;
  ChainPlan plan;
  const Status status = planChain(c.spec, c.from, c.chain, c.consume, cost, plan);
  ASSERT_TRUE(status.isOk()) << status.toString();

  const sim::RankTensors input = sim::distribute(c.from, c.spec, seed);
  sim::Traffic chainTraffic, fusedTraffic, baselineTraffic;
  const sim::RankTensors final = sim::runChain(plan.trace, c.spec, input, chainTraffic);
  const sim::RankTensors expected = sim::consume(final, plan.trace.final(), plan.consumed, c.spec);
  const sim::RankTensors fused = sim::runPlan(plan.fused, input, fusedTraffic);
  const sim::RankTensors baseline = sim::runPlan(plan.baseline, input, baselineTraffic);
  ASSERT_EQ(fused, expected) << "fused plan:\n" << plan.fused.toString();
  ASSERT_EQ(baseline, expected) << "baseline plan:\n" << plan.baseline.toString();

  EXPECT_LE(fusedTraffic.total(), chainTraffic.total()) << plan.fused.toString();
  EXPECT_EQ(baselineTraffic.perRank, chainTraffic.perRank);
  EXPECT_EQ(plan.fusedBytes.perRank, fusedTraffic.perRank);
  EXPECT_EQ(plan.baselineBytes.perRank, chainTraffic.perRank);
  if (plan.useFused) {
    EXPECT_LE(plan.fusedBytes.total, plan.baselineBytes.total);
  }

  ChainPlan again;
  ASSERT_TRUE(planChain(c.spec, c.from, c.chain, c.consume, cost, again).isOk());
  EXPECT_EQ(again.fused.toString(), plan.fused.toString());
  for (std::size_t s = 0; s < plan.fused.steps.size(); ++s) {
    EXPECT_EQ(again.fused.steps[s].transfers, plan.fused.steps[s].transfers);
  }

  ChainAnalysis analysis;
  const Status analysed = analyzeChain(plan.trace, plan.consumed, c.spec, analysis);
  ASSERT_TRUE(analysed.isOk()) << analysed.toString();
  EXPECT_EQ(analysis.bytesTotal, chainTraffic.total());
  for (const auto& op : analysis.ops) {
    EXPECT_GE(op.unconsumedTotal, 0) << op.op;
    EXPECT_LE(op.unconsumedTotal, op.bytesTotal) << op.op;
  }

  ++stats.cases;
  stats.fusedCheaper += plan.fusedBytes.total < plan.baselineBytes.total ? 1 : 0;
  for (const auto& step : plan.fused.steps) stats.manyToMany += step.kind == PlanStep::Kind::ManyToMany ? 1 : 0;
}

TEST(PlannerProperty, FusedPlanDeliversTheChainsConsumedDataWithNoMoreBytes) {
  Stats stats;
  // CHIMERA_PROPERTY_SEED=N reruns one case.
  const char* only = std::getenv("CHIMERA_PROPERTY_SEED");
  const std::uint64_t first = only != nullptr ? std::strtoull(only, nullptr, 10) : 1;
  const std::uint64_t last = only != nullptr ? first : 3000;
  for (std::uint64_t seed = first; seed <= last; ++seed) {
    Generator gen(seed);
    const auto c = gen.chainCase();
    if (!c) continue;
    checkCase(*c, seed, stats);
    if (::testing::Test::HasFatalFailure()) return;
  }
  if (only != nullptr) return;
  // The generator must exercise the interesting paths, not only trivial chains.
  EXPECT_GT(stats.cases, 2500);
  EXPECT_GT(stats.fusedCheaper, stats.cases / 5);
  EXPECT_GT(stats.manyToMany, 100);
  std::printf("property cases %d, fused cheaper in %d, many-to-many steps %d\n", stats.cases, stats.fusedCheaper,
              stats.manyToMany);
}

// Plans chosen by the topology model (other candidates win: hierarchical reductions,
// direct multicasts, ...) must be exactly as correct; bytes may exceed the chain's there.
TEST(PlannerProperty, TopologyCostPlansDeliverTheSameData) {
  const char* names[] = {"pcie-4080x8", "nvswitch-h20x8", "multinode-ib:8"};
  std::vector<std::unique_ptr<TopologyCost>> costs;
  for (const char* name : names) {
    Topology topology;
    ASSERT_TRUE(loadTopology(name, topology).isOk()) << name;
    costs.push_back(std::make_unique<TopologyCost>(std::move(topology)));
  }
  int fusedCases = 0;
  for (std::uint64_t seed = 5001; seed <= 5800; ++seed) {
    Generator gen(seed);
    const auto c = gen.chainCase();
    if (!c) continue;
    const PlanCost& cost = c->mesh.size() > 8 ? *costs[2] : *costs[seed % 2];
    SCOPED_TRACE(fmt::format("seed {} cost {}: {}", seed, cost.name(), c->describe()));
    ChainPlan plan;
    const Status status = planChain(c->spec, c->from, c->chain, c->consume, cost, plan);
    ASSERT_TRUE(status.isOk()) << status.toString();
    const sim::RankTensors input = sim::distribute(c->from, c->spec, seed);
    sim::Traffic chainTraffic, fusedTraffic;
    const sim::RankTensors final = sim::runChain(plan.trace, c->spec, input, chainTraffic);
    ASSERT_EQ(sim::runPlan(plan.fused, input, fusedTraffic),
              sim::consume(final, plan.trace.final(), plan.consumed, c->spec))
        << plan.fused.toString();
    EXPECT_EQ(plan.fusedBytes.perRank, fusedTraffic.perRank);
    fusedCases += plan.useFused ? 1 : 0;
  }
  EXPECT_GT(fusedCases, 100);
}

// Chains whose axes nest in orders other than mesh order: ReduceScatters one axis at a time
// in a random order, an AllReduce over every partial axis consumed as shards nested in a
// random order, AllGathers of such shards innermost first. Meshes of 2-3 axes of sizes 2-4.
std::optional<Case> nestingOrderCase(Generator& gen, bool& meshOrder) {
  Case c;
  std::vector<MeshAxis> axes;
  const int count = gen.uniform(2, 3);
  int world = 1;
  for (int i = 0; i < count; ++i) {
    axes.push_back({fmt::format("a{}", i), gen.uniform(2, 4)});
    world *= axes.back().size;
  }
  if (!Mesh::create(axes, world, c.mesh).isOk()) return std::nullopt;
  c.spec.dtype = kAllDataTypes[gen.uniform(0, 6)];
  const int rank = gen.uniform(1, 2);
  for (int d = 0; d < rank; ++d) c.spec.shape.push_back(static_cast<std::int64_t>(world) * gen.uniform(1, 2));
  std::vector<int> order(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) order[static_cast<std::size_t>(i)] = i;
  for (int i = count - 1; i > 0; --i) {
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(gen.uniform(0, i))]);
  }
  meshOrder = std::is_sorted(order.begin(), order.end());
  const int dim = gen.uniform(0, rank - 1);
  const std::string dimText = std::to_string(dim);
  std::string chainText;
  Layout consumed;
  const int shape = gen.uniform(0, 2);
  if (shape == 2) {
    // Shards nested in `order`, gathered innermost first (one axis per AllGather).
    c.from = Layout::replicated(c.mesh);
    for (int axis : order) c.from = c.from.with(axis, Placement::shard(dim));
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (!chainText.empty()) chainText += ',';
      chainText += fmt::format("allgather:a{}:{}", *it, dimText);
    }
  } else {
    c.from = Layout::replicated(c.mesh);
    for (int axis = 0; axis < count; ++axis) c.from = c.from.with(axis, Placement::partial(ReduceOp::Sum));
    if (shape == 0) {
      for (int axis : order) {
        if (!chainText.empty()) chainText += ',';
        chainText += fmt::format("reducescatter:a{}:{}", axis, dimText);
      }
    } else {
      std::string group;
      for (int axis = 0; axis < count; ++axis) group += fmt::format("{}a{}", group.empty() ? "" : "+", axis);
      chainText = "allreduce:" + group;
      consumed = Layout::replicated(c.mesh);
      for (int axis : order) consumed = consumed.with(axis, Placement::shard(dim));
      c.consume = consumed;
    }
  }
  if (!c.from.validate(c.spec).isOk()) return std::nullopt;
  if (!Chain::parse(chainText, c.mesh, c.chain).isOk()) return std::nullopt;
  return c;
}

// The chain as written is among the candidates and every nesting order is searched, so the
// chosen plan never sends more bytes (bytes cost) nor is predicted slower (topology cost)
// than the chain, and it delivers exactly the chain's data.
TEST(PlannerProperty, FusedPlanIsNeverWorseThanTheChainInAnyNestingOrder) {
  std::vector<std::unique_ptr<PlanCost>> costs;
  costs.push_back(std::make_unique<BytesCost>());
  for (const char* name : {"pcie-4080x8", "nvswitch-h20x8", "multinode-ib:8"}) {
    Topology topology;
    ASSERT_TRUE(loadTopology(name, topology).isOk()) << name;
    costs.push_back(std::make_unique<TopologyCost>(std::move(topology)));
  }
  int cases = 0;
  int nonMeshOrder = 0;
  for (std::uint64_t seed = 9001; seed <= 9400; ++seed) {
    Generator gen(seed);
    bool meshOrder = true;
    const auto c = nestingOrderCase(gen, meshOrder);
    if (!c) continue;
    for (std::size_t k = 0; k < costs.size(); ++k) {
      const PlanCost& cost = *costs[k];
      if (k > 0 && k < 3 && c->mesh.size() > 8) continue;  // single-node presets have 8 GPUs
      SCOPED_TRACE(fmt::format("seed {} cost {}: {}", seed, cost.name(), c->describe()));
      ChainPlan plan;
      const Status status = planChain(c->spec, c->from, c->chain, c->consume, cost, plan);
      ASSERT_TRUE(status.isOk()) << status.toString();
      const sim::RankTensors input = sim::distribute(c->from, c->spec, seed);
      sim::Traffic chainTraffic, fusedTraffic;
      const sim::RankTensors final = sim::runChain(plan.trace, c->spec, input, chainTraffic);
      ASSERT_EQ(sim::runPlan(plan.fused, input, fusedTraffic),
                sim::consume(final, plan.trace.final(), plan.consumed, c->spec))
          << plan.fused.toString();
      if (k == 0) {
        EXPECT_LE(fusedTraffic.total(), chainTraffic.total()) << plan.fused.toString();
      }
      EXPECT_LE(plan.fusedCost.value, plan.baselineCost.value) << plan.fused.toString();
      ++cases;
    }
    nonMeshOrder += meshOrder ? 0 : 1;
  }
  EXPECT_GT(cases, 800);
  EXPECT_GT(nonMeshOrder, 50);
}

// A rank's plan (planChain with `rank`) is its part of the world plan: the same decision,
// costs, bytes, steps and flows, and exactly the world's transfers that it sends or
// receives. Every rank of random cases, priced by bytes and by the topology presets.
void checkRankPlans(const Case& c, const PlanCost& cost) {
  ChainPlan world;
  const Status status = planChain(c.spec, c.from, c.chain, c.consume, cost, world);
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int rank = 0; rank < c.mesh.size(); ++rank) {
    SCOPED_TRACE(fmt::format("rank {}", rank));
    ChainPlan mine;
    const Status planned = planChain(c.spec, c.from, c.chain, c.consume, cost, mine, rank);
    ASSERT_TRUE(planned.isOk()) << planned.toString();
    EXPECT_EQ(mine.useFused, world.useFused);
    EXPECT_EQ(mine.candidates, world.candidates);
    EXPECT_EQ(mine.fusedCost.value, world.fusedCost.value);
    EXPECT_EQ(mine.baselineCost.value, world.baselineCost.value);
    EXPECT_EQ(mine.fusedBytes.perRank, world.fusedBytes.perRank);
    EXPECT_EQ(mine.explain, world.explain);
    for (const auto& [m, w] : {std::pair{&mine.fused, &world.fused}, std::pair{&mine.baseline, &world.baseline}}) {
      EXPECT_EQ(m->rank, rank);
      ASSERT_EQ(m->toString(), w->toString());
      for (std::size_t s = 0; s < w->steps.size(); ++s) {
        std::vector<BoxTransfer> expected;
        std::copy_if(w->steps[s].transfers.begin(), w->steps[s].transfers.end(), std::back_inserter(expected),
                     [rank](const BoxTransfer& t) { return t.src == rank || t.dst == rank; });
        EXPECT_EQ(m->steps[s].transfers, expected) << "step " << s;
        EXPECT_EQ(m->steps[s].flows, w->steps[s].flows) << "step " << s;
      }
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(PlannerProperty, EachRanksPlanIsItsPartOfTheWorldPlan) {
  const BytesCost bytes;
  Topology topology;
  ASSERT_TRUE(loadTopology("multinode-ib:8", topology).isOk());
  const TopologyCost multinode(std::move(topology));
  int cases = 0;
  int withTransfers = 0;
  for (std::uint64_t seed = 1; seed <= 600; ++seed) {
    Generator gen(seed);
    const auto c = gen.chainCase();
    if (!c) continue;
    const PlanCost& cost = seed % 2 == 0 ? static_cast<const PlanCost&>(bytes) : multinode;
    SCOPED_TRACE(fmt::format("seed {} cost {}: {}", seed, cost.name(), c->describe()));
    checkRankPlans(*c, cost);
    if (::testing::Test::HasFailure()) return;
    ++cases;
    ChainPlan plan;
    ASSERT_TRUE(planChain(c->spec, c->from, c->chain, c->consume, cost, plan).isOk());
    for (const auto& step : plan.fused.steps) withTransfers += step.flows.empty() ? 0 : 1;
  }
  EXPECT_GT(cases, 500);
  EXPECT_GT(withTransfers, 20);  // the cut-down transfers are exercised, not only collectives
}

TEST(PlannerProperty, PlanningForARankOutsideTheMeshFails) {
  Mesh mesh;
  ASSERT_TRUE(Mesh::parse("tp=4", mesh).isOk());
  Layout from;
  ASSERT_TRUE(Layout::parse("tp=P", mesh, from).isOk());
  Chain chain;
  ASSERT_TRUE(Chain::parse("allreduce:tp", mesh, chain).isOk());
  ChainPlan plan;
  for (const int rank : {4, -2}) {
    const Status status =
        planChain(TensorSpec{{8, 8}, DataType::F32}, from, chain, std::nullopt, BytesCost(), plan, rank);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
    EXPECT_NE(status.message().find(fmt::format("rank {}", rank)), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("0..3"), std::string::npos) << status.message();
  }
}

TEST(PlannerProperty, SimulatorGeometryMatchesLayoutGeometry) {
  for (std::uint64_t seed = 1; seed <= 500; ++seed) {
    Generator gen(seed);
    const Mesh mesh = gen.mesh();
    const TensorSpec spec = gen.spec(mesh);
    const Layout layout = gen.layout(mesh, spec);
    for (int r = 0; r < mesh.size(); ++r) {
      ASSERT_EQ(sim::simHolds(layout, r), layout.holds(r)) << layout.toString();
      if (layout.holds(r)) {
        ASSERT_EQ(sim::simBox(layout, spec, r), layout.rankBox(r, spec)) << layout.toString();
      }
    }
  }
}

}  // namespace
}  // namespace chimera
