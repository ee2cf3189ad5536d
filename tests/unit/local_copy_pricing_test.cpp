// SPDX-License-Identifier: Apache-2.0
// Local copies (packs, unpacks, copies) priced: each step's local work as the executor makes
// it, the planner's tie-break on it under the bytes cost, and the topology model's decision
// turning when copies cost more than the bytes a fused plan saves.
#include <gtest/gtest.h>

#include "chimera/planning/planner.hpp"
#include "chimera/planning/topology_cost.hpp"

namespace chimera {
namespace {

struct Case {
  Mesh mesh;
  TensorSpec spec{{4096, 1024}, DataType::F32};  // 16 MiB
  Layout from, consume;
  Chain chain;
};

Case chainCase(const char* mesh, int world, const char* from, const char* chain, const char* consume) {
  Case c;
  EXPECT_TRUE(Mesh::parse(mesh, world, c.mesh).isOk());
  EXPECT_TRUE(Layout::parse(from, c.mesh, c.from).isOk());
  EXPECT_TRUE(Chain::parse(chain, c.mesh, c.chain).isOk());
  EXPECT_TRUE(Layout::parse(consume, c.mesh, c.consume).isOk());
  return c;
}

ChainPlan plan(const Case& c, const PlanCost& cost) {
  ChainPlan out;
  const Status status = planChain(c.spec, c.from, c.chain, c.consume, cost, out);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return out;
}

const PlanStep& onlyStep(const Plan& p, PlanStep::Kind kind) {
  const auto it = std::find_if(p.steps.begin(), p.steps.end(), [&](const PlanStep& s) { return s.kind == kind; });
  EXPECT_NE(it, p.steps.end()) << p.toString();
  return *it;
}

// A ReduceScatter along dim 0 sends contiguous blocks; along dim 1 of a 2-D tensor it packs
// its whole input first; the consumer's slice of the chain as written copies the consumed part.
TEST(LocalWork, FollowsTheExecutorsPassesPerStep) {
  const BytesCost bytes;
  const ChainPlan rows = plan(chainCase("tp=8", 8, "tp=P", "allreduce:tp", "tp=S0"), bytes);
  ASSERT_TRUE(rows.useFused);
  EXPECT_EQ(stepLocalWork(rows.fused, onlyStep(rows.fused, PlanStep::Kind::ReduceScatter)).bytes, 0u);
  EXPECT_EQ(planLocalBytes(rows.fused), 0u);
  // The chain as written: AllReduce (in place, no pass) and the copy of the rows read (2 MiB).
  EXPECT_EQ(planLocalBytes(rows.baseline), std::uint64_t{2} << 20);

  const ChainPlan cols = plan(chainCase("tp=8", 8, "tp=P", "allreduce:tp", "tp=S1"), bytes);
  const LocalWork packed = stepLocalWork(cols.fused, onlyStep(cols.fused, PlanStep::Kind::ReduceScatter));
  EXPECT_EQ(packed.bytes, std::uint64_t{16} << 20);  // the whole input, packed by columns
  EXPECT_EQ(packed.launches, 1);
  EXPECT_EQ(packed.ranks, 8);
}

// Under the bytes cost two plans that send the same bytes are ordered by their local bytes
// before their steps: a plan that copies is not preferred for having one step less.
TEST(LocalWork, BreaksTiesOfTheBytesCost) {
  const BytesCost bytes;
  const ChainPlan p = plan(chainCase("tp=8", 8, "tp=P", "allreduce:tp", "tp=S0"), bytes);
  Plan copying = p.fused;  // the ReduceScatter, then a copy of its output onto itself
  PlanStep copy;
  copy.kind = PlanStep::Kind::LocalCopy;
  copy.input = Plan::kOutput;
  copy.output = Plan::kOutput;
  copying.steps.push_back(copy);
  EXPECT_EQ(bytes.predict(copying).value, bytes.predict(p.fused).value);
  EXPECT_TRUE(predictedCheaper(p.fused, copying, bytes));
  EXPECT_FALSE(predictedCheaper(copying, p.fused, bytes));
  EXPECT_FALSE(predictedCheaper(p.fused, p.fused, bytes));  // strictly
  // Fewer steps still decide between plans with equal bytes and equal local bytes.
  Plan twoSteps = p.fused;
  twoSteps.steps.push_back(onlyStep(p.fused, PlanStep::Kind::ReduceScatter));
  twoSteps.steps.back().input = Plan::kOutput;
  EXPECT_TRUE(predictedCheaper(p.fused, twoSteps, bytes) ||
              bytes.predict(twoSteps).value > bytes.predict(p.fused).value);
}

// The topology model prices the passes: reading columns of a 2-D AllReduce fuses into a
// ReduceScatter along dim 1, which packs the whole input. With memory far faster than the
// links the bytes it saves pay for the pack; with memory far slower the pack costs more than
// they save, and the planner picks a program that sends more bytes but packs less.
TEST(LocalWork, CopiesCostingMoreThanTheSavedBytesAreNotChosen) {
  const Case c = chainCase("tp=8", 8, "tp=P", "allreduce:tp", "tp=S1");
  Topology host;
  ASSERT_TRUE(loadTopology("host:8", host).isOk());
  host.device.memoryBytesPerSecond = 1000 * host.local.bytesPerSecond;
  const ChainPlan fast = plan(c, TopologyCost(host));
  EXPECT_TRUE(fast.useFused) << fast.explain;
  Topology slowMemory = host;
  slowMemory.device.memoryBytesPerSecond = host.local.bytesPerSecond / 100;
  const ChainPlan slow = plan(c, TopologyCost(slowMemory));
  EXPECT_EQ(planLocalBytes(fast.chosen()), std::uint64_t{16} << 20) << fast.chosen().toString();
  EXPECT_LT(planLocalBytes(slow.chosen()), planLocalBytes(fast.chosen())) << slow.chosen().toString();
  EXPECT_GT(planBytes(slow.chosen()).total, planBytes(fast.chosen()).total) << slow.explain;
}

}  // namespace
}  // namespace chimera
