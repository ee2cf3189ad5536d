// SPDX-License-Identifier: Apache-2.0
// Local copies (packs, unpacks, copies) priced: each step's local work as the executor makes
// it, the planner's tie-break on it under the bytes cost, and the topology model's decision
// turning when copies cost more than the bytes a fused plan saves.
#include <gtest/gtest.h>

#include <tuple>

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

// One rule for the executor and the models: a box moves as a box only where the transport
// moves boxes, it is not one run on both sides, it is large enough, and one side has runs of a
// page or more; then only a side with shorter runs packs or unpacks.
TEST(LocalWork, TransferPassesMoveLargeBoxesOfLongRuns) {
  constexpr std::int64_t kBox = kMinMovedBoxBytes;
  const auto passes = [](std::int64_t bytes, std::int64_t src, std::int64_t dst, bool moves) {
    const TransferPasses p = transferPasses(bytes, src, dst, moves);
    return std::tuple(p.movedAsBox, p.pack, p.unpack);
  };
  // No box moves: a side that is not one run packs or unpacks.
  EXPECT_EQ(passes(kBox, 4096, kBox, false), std::tuple(false, true, false));
  EXPECT_EQ(passes(kBox, kBox, 4096, false), std::tuple(false, false, true));
  EXPECT_EQ(passes(kBox, 64, 64, false), std::tuple(false, true, true));
  EXPECT_EQ(passes(kBox, kBox, kBox, false), std::tuple(false, false, false));
  // Boxes move: runs of a page or more are read in place, shorter ones packed first.
  EXPECT_EQ(passes(kBox, 4096, kBox, true), std::tuple(true, false, false));
  EXPECT_EQ(passes(kBox, 4096, 8192, true), std::tuple(true, false, false));
  EXPECT_EQ(passes(kBox, 1024, 8192, true), std::tuple(true, true, false));
  EXPECT_EQ(passes(kBox, 8192, 1024, true), std::tuple(true, false, true));
  // ... but not when no side has runs of a page that are not one run: both short, or one
  // short and the other one run (a plain transfer once packed), or one run on both sides; nor
  // when the box is small.
  EXPECT_EQ(passes(kBox, 1024, 2048, true), std::tuple(false, true, true));
  EXPECT_EQ(passes(kBox, 1024, kBox, true), std::tuple(false, true, false));
  EXPECT_EQ(passes(kBox, kBox, 2048, true), std::tuple(false, false, true));
  EXPECT_EQ(passes(kBox - 4, 4096, 8192, true), std::tuple(false, true, true));
  EXPECT_EQ(passes(kBox, kBox, kBox, true), std::tuple(false, false, false));
}

// pp_ep's fused plan is one many-to-many from row shards of stage 0 to column shards of stage
// 1: each box is a quarter of the sender's columns and whole rows of the receiver's. Packed on a
// transport that moves no boxes; read in place on one that does, at a page's pass per run of the
// sender's box, which the topology model prices as cheaper when runs are longer than a page.
// The chain as written (a send and an AllToAll, no many-to-many) costs the same either way.
TEST(LocalWork, BoxesTheTransportMovesCostAPagePerRun) {
  Case c = chainCase("pp=2,ep=4", 8, "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1");
  c.spec = TensorSpec{{256, 16384}, DataType::F32};  // boxes of 64 runs of 16 KiB
  const BytesCost bytes;
  const ChainPlan p = plan(c, bytes);
  ASSERT_TRUE(p.useFused) << p.explain;
  const PlanStep& step = onlyStep(p.fused, PlanStep::Kind::ManyToMany);
  EXPECT_EQ(stepLocalWork(p.fused, step).bytes, std::uint64_t{4} << 20);  // the sender's 64 x 16384 rows
  // The receiver reads 4 boxes of 64 runs each: 256 pages.
  EXPECT_EQ(stepLocalWork(p.fused, step, true).bytes, std::uint64_t{256} * kReadRunPassBytes);

  Topology host;
  ASSERT_TRUE(loadTopology("host:8", host).isOk());
  ASSERT_FALSE(host.movesBoxes);
  Topology reading = host;
  reading.movesBoxes = true;
  const TopologyCost packing(host), moving(reading);
  EXPECT_LT(moving.predict(p.fused).value, packing.predict(p.fused).value);
  EXPECT_EQ(moving.predict(p.baseline).value, packing.predict(p.baseline).value);

  // Runs of a page cost as much read as packed.
  c.spec = TensorSpec{{1024, 4096}, DataType::F32};
  const ChainPlan pages = plan(c, bytes);
  const PlanStep& pageStep = onlyStep(pages.fused, PlanStep::Kind::ManyToMany);
  EXPECT_EQ(stepLocalWork(pages.fused, pageStep, true).bytes, std::uint64_t{4} << 20);
  EXPECT_EQ(stepLocalWork(pages.fused, pageStep).bytes, std::uint64_t{4} << 20);
  // Small boxes are packed whatever the transport.
  c.spec = TensorSpec{{64, 256}, DataType::F32};
  const ChainPlan small = plan(c, bytes);
  const PlanStep& smallStep = onlyStep(small.fused, PlanStep::Kind::ManyToMany);
  EXPECT_GT(stepLocalWork(small.fused, smallStep).bytes, 0u);
  EXPECT_EQ(stepLocalWork(small.fused, smallStep, true).bytes, stepLocalWork(small.fused, smallStep).bytes);
}

}  // namespace
}  // namespace chimera
