// SPDX-License-Identifier: Apache-2.0
// The alpha-beta model's arithmetic on small hand-checked cases, and sane behaviour of
// every preset (monotone in bytes and group size, link sharing visible).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "chimera/planning/cost_model.hpp"
#include "cost/fabric.hpp"

namespace chimera {
namespace {

Topology preset(const std::string& name) {
  Topology topology;
  const Status status = loadTopology(name, topology);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return topology;
}

StepCost price(const CostModel& model, const CommStep& step) {
  StepCost cost;
  const Status status = model.predictStep(step, cost);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return cost;
}

std::vector<int> iota(int from, int count) {
  std::vector<int> ranks;
  for (int i = 0; i < count; ++i) ranks.push_back(from + i);
  return ranks;
}

// A one-bus host with round numbers: 1 us alpha, 1 GB/s, 1 ns per reduced byte, 2 cores.
Topology roundHost(int ranks) {
  Topology t;
  t.name = "round-host";
  t.fabric = Fabric::SharedMemory;
  t.ranks = ranks;
  t.ranksPerDomain = ranks;
  t.local = {1e-6, 1e9};
  t.reduceSecondsPerByte = 1e-9;
  t.computeSlots = 2;
  EXPECT_TRUE(validateTopology(t).isOk());
  return t;
}

TEST(CostModel, RingAllReduceOnOneBusAddsAlphaBusAndSharedReduction) {
  const CostModel model(roundHost(4));
  // 6 rounds; each round 4 flows of 1000 B share the bus: 4 us; reductions: 3 rounds of
  // 1000 B on 4 ranks sharing 2 cores: 3 * 1000 * 2 ns.
  const StepCost cost = price(model, CommStep::collective(OpKind::AllReduce, {iota(0, 4)}, 4000));
  EXPECT_DOUBLE_EQ(cost.latencySeconds, 6e-6);
  EXPECT_DOUBLE_EQ(cost.transferSeconds, 24e-6);
  EXPECT_DOUBLE_EQ(cost.reduceSeconds, 6e-6);
  EXPECT_DOUBLE_EQ(cost.seconds, 36e-6);
  EXPECT_EQ(cost.bottleneck, "memory bus");

  const StepCost rs = price(model, CommStep::collective(OpKind::ReduceScatter, {iota(0, 4)}, 4000));
  EXPECT_DOUBLE_EQ(rs.seconds, 3e-6 + 12e-6 + 6e-6);
  const StepCost ag = price(model, CommStep::collective(OpKind::AllGather, {iota(0, 4)}, 1000));
  EXPECT_DOUBLE_EQ(ag.seconds, 3e-6 + 12e-6);
  const StepCost a2a = price(model, CommStep::collective(OpKind::AllToAll, {iota(0, 4)}, 4000));
  EXPECT_DOUBLE_EQ(a2a.seconds, 1e-6 + 12e-6);  // 12 flows of 1000 B at once
  const StepCost bcast = price(model, CommStep::collective(OpKind::Broadcast, {iota(0, 4)}, 1000));
  EXPECT_DOUBLE_EQ(bcast.seconds, 3e-6 + 3e-6);  // chain of 3 links, pipelined
}

TEST(CostModel, PcieCrossHalfTrafficSharesTheCpuLink) {
  const Topology pcie = preset("pcie-4080x8");
  const CostModel model(pcie);
  const double mb = 1e6;
  // Ring over all 8: links 3->4 and 7->0 cross halves, one flow per direction, and the
  // CPU link (12 GB/s) is slower than a GPU's own link (22 GB/s).
  const StepCost ring = price(model, CommStep::collective(OpKind::AllReduce, {iota(0, 8)}, 8 * 1000000));
  EXPECT_NEAR(ring.transferSeconds, 14 * mb / pcie.cross.bytesPerSecond, 1e-12);
  EXPECT_NEAR(ring.latencySeconds, 14 * pcie.cross.alphaSeconds, 1e-15);
  EXPECT_EQ(ring.bottleneck.rfind("cpu link domain", 0), 0u) << ring.bottleneck;

  // Four pairs 0-3 -> 4-7 share the CPU link; the same four pairs inside one half do not.
  std::vector<Transfer> cross;
  std::vector<Transfer> inside;
  for (int r = 0; r < 4; ++r) {
    cross.push_back({r, r + 4, 1000000});
    inside.push_back({r, (r + 1) % 4, 1000000});
  }
  const StepCost crossCost = price(model, CommStep::manyToMany(cross));
  const StepCost insideCost = price(model, CommStep::manyToMany(inside));
  EXPECT_NEAR(crossCost.transferSeconds, 4 * mb / pcie.cross.bytesPerSecond, 1e-12);
  EXPECT_EQ(crossCost.bottleneck, "cpu link domain 0->1");
  EXPECT_NEAR(insideCost.transferSeconds, mb / pcie.local.bytesPerSecond, 1e-12);
  EXPECT_GT(crossCost.seconds, 4 * insideCost.transferSeconds);
}

TEST(CostModel, NvSwitchPortBandwidthFallsWithConcurrentPeers) {
  const Topology h20 = preset("nvswitch-h20x8");
  const Topology h100 = preset("dgx-h100x8");
  ASSERT_GT(h20.peerPenalty, 0.0);
  // 8-rank all-to-all of L = 8 MB: every port carries 7 MB to 7 peers.
  const CommStep a2a = CommStep::collective(OpKind::AllToAll, {iota(0, 8)}, 8000000);
  const StepCost slow = price(CostModel(h20), a2a);
  const StepCost fast = price(CostModel(h100), a2a);
  EXPECT_NEAR(slow.transferSeconds, 7e6 * (1 + 6 * h20.peerPenalty) / h20.local.bytesPerSecond, 1e-12);
  EXPECT_NEAR(fast.transferSeconds, 7e6 / h100.local.bytesPerSecond, 1e-12);
  // One peer each (a ring round) pays no penalty.
  const StepCost ring = price(CostModel(h20), CommStep::collective(OpKind::AllGather, {iota(0, 8)}, 1000000));
  EXPECT_NEAR(ring.transferSeconds, 7 * 1e6 / h20.local.bytesPerSecond, 1e-12);
}

TEST(CostModel, StepLaunchPeersAndLocalPassesAreAddedPerStep) {
  Topology t = roundHost(8);
  t.stepSeconds = 10e-6;
  t.peerSeconds = 2e-6;
  t.device = {1e9, 3e-6, 0};  // 1 GB/s memory, 3 us per local kernel
  const CostModel model(t);
  // A ring AllGather: one peer, so the step cost alone; no local work.
  const StepCost ring = price(model, CommStep::collective(OpKind::AllGather, {iota(0, 4)}, 1000));
  EXPECT_NEAR(ring.overheadSeconds, 10e-6, 1e-15);
  EXPECT_EQ(ring.localSeconds, 0);
  // An AllToAll of 8 talks to 7 peers: 6 extra; a pack and an unpack of 1 MB each.
  CommStep a2a = CommStep::collective(OpKind::AllToAll, {iota(0, 8)}, 1000000);
  a2a.localBytes = 2000000;
  a2a.localLaunches = 2;
  const StepCost all = price(model, a2a);
  EXPECT_NEAR(all.overheadSeconds, 10e-6 + 6 * 2e-6 + 2 * 3e-6, 1e-15);
  EXPECT_NEAR(all.localSeconds, 2 * 2000000 / 1e9, 1e-15);  // each pass reads and writes
  EXPECT_NEAR(all.seconds,
              all.latencySeconds + all.transferSeconds + all.reduceSeconds + all.overheadSeconds + all.localSeconds,
              1e-15);
  // A many-to-many fan-out: rank 0 sends to 3 peers, each receives from one.
  const StepCost fan = price(model, CommStep::manyToMany({{0, 1, 100}, {0, 2, 100}, {0, 3, 100}}));
  EXPECT_NEAR(fan.overheadSeconds, 10e-6 + 2 * 2e-6, 1e-15);
  // Local work alone (a copy): no step cost, the kernel and its pass.
  CommStep copy = CommStep::manyToMany({});
  copy.localBytes = 1000;
  copy.localLaunches = 1;
  const StepCost local = price(model, copy);
  EXPECT_NEAR(local.seconds, 3e-6 + 2 * 1000 / 1e9, 1e-15);
  // A step that moves nothing costs nothing.
  EXPECT_EQ(price(model, CommStep::collective(OpKind::AllReduce, {{0}, {1}}, 1000)).seconds, 0);
}

TEST(CostModel, LocalPassesOfFewerRanksRunFasterWhenRanksShareCores) {
  Topology host = roundHost(8);
  host.computeSlots = 2;
  host.device.memoryBytesPerSecond = 1e9;                    // per rank, measured with all 8 passing at once
  EXPECT_NEAR(localPassSeconds(host, 1e6, 0), 2e-3, 1e-15);  // 0 = every rank
  EXPECT_NEAR(localPassSeconds(host, 1e6, 8), 2e-3, 1e-15);
  EXPECT_NEAR(localPassSeconds(host, 1e6, 4), 1e-3, 1e-15);    // half the ranks: twice the cores each
  EXPECT_NEAR(localPassSeconds(host, 1e6, 1), 0.5e-3, 1e-15);  // no faster than a core of its own
  EXPECT_NEAR(localPassSeconds(host, 1e6, 2), 0.5e-3, 1e-15);
  // Devices of their own (computeSlots 0): the count does not matter; unmodelled: free.
  Topology gpus = host;
  gpus.computeSlots = 0;
  EXPECT_NEAR(localPassSeconds(gpus, 1e6, 4), 2e-3, 1e-15);
  gpus.device.memoryBytesPerSecond = 0;
  EXPECT_EQ(localPassSeconds(gpus, 1e6, 4), 0);
  // A step carries the count; a count beyond the topology is refused.
  CommStep copy = CommStep::manyToMany({});
  copy.localBytes = 1000000;
  copy.localRanks = 4;
  EXPECT_NEAR(price(CostModel(host), copy).localSeconds, 1e-3, 1e-15);
  copy.localRanks = 9;
  StepCost cost;
  const Status status = CostModel(host).predictStep(copy, cost);
  EXPECT_NE(status.message().find("local ranks must be in 0..8, got 9"), std::string::npos) << status.message();
}

// The closed form of an AllToAll round (per-domain member counts) must price exactly what
// its n^2 flows do, on every fabric, for groups that span domains unevenly.
TEST(CostModel, AllToAllClosedFormEqualsItsFlows) {
  std::mt19937 rng(7);
  for (const std::string& name : {std::string("host"), std::string("pcie-4080x8"), std::string("nvswitch-h20x8"),
                                  std::string("dgx-h100x8"), std::string("multinode-ib:4")}) {
    const Topology t = preset(name);
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<int> ranks = iota(0, t.ranks);
      std::shuffle(ranks.begin(), ranks.end(), rng);
      const int size = std::uniform_int_distribution<int>(2, std::min(8, t.ranks))(rng);
      std::vector<std::vector<int>> groups;
      for (int g = 0; g + 1 <= t.ranks / size && g < 3; ++g) {
        groups.emplace_back(ranks.begin() + g * size, ranks.begin() + (g + 1) * size);
      }
      std::vector<detail::Flow> flows;
      for (const auto& group : groups) {
        for (const int src : group) {
          for (const int dst : group) flows.push_back({src, dst, 1000.0});
        }
      }
      const detail::RoundCost byFlows = detail::priceRound(t, flows);
      const detail::RoundCost closed = detail::priceAllToAllRound(t, groups, 1000.0);
      EXPECT_NEAR(closed.transferSeconds, byFlows.transferSeconds, 1e-12 * byFlows.transferSeconds) << name;
      EXPECT_EQ(closed.latencySeconds, byFlows.latencySeconds) << name;
      EXPECT_EQ(closed.bottleneck.empty(), byFlows.bottleneck.empty()) << name;
    }
  }
}

TEST(CostModel, MultiNodeTrafficUsesTheNicsAndNodeCountIsAParameter) {
  const Topology ib = preset("multinode-ib:4");
  EXPECT_EQ(ib.ranks, 32);
  EXPECT_EQ(ib.name, "multinode-ib:4");
  const CostModel model(ib);
  const StepCost inNode = price(model, CommStep::manyToMany({{0, 1, 1000000}}));
  const StepCost across = price(model, CommStep::manyToMany({{0, 8, 1000000}}));
  EXPECT_EQ(across.bottleneck, "nic of gpu 0 tx");
  EXPECT_NEAR(across.transferSeconds, 1e6 / ib.cross.bytesPerSecond, 1e-12);
  EXPECT_GT(across.transferSeconds, 5 * inNode.transferSeconds);
  EXPECT_GT(across.seconds, inNode.seconds);
  StepCost outOfRange;
  EXPECT_FALSE(model.predictStep(CommStep::manyToMany({{0, 32, 1}}), outOfRange).isOk());
}

TEST(CostModel, EveryPresetIsMonotoneInBytesAndGroupSize) {
  for (const std::string& name : topologyPresetNames()) {
    const CostModel model(preset(name));
    for (const OpKind kind :
         {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::AllToAll, OpKind::Broadcast}) {
      double previous = 0;
      for (std::uint64_t bytes = 1024; bytes <= (std::uint64_t{1} << 30); bytes *= 4) {
        const double t = price(model, CommStep::collective(kind, {iota(0, 8)}, bytes)).seconds;
        EXPECT_GT(t, previous) << name << " " << opKindName(kind) << " " << bytes;
        previous = t;
      }
      // AllGather of L per rank gathers more as the group grows; the others at least pay
      // more rounds of latency.
      const double t4 = price(model, CommStep::collective(kind, {iota(0, 4)}, 1 << 24)).seconds;
      const double t8 = price(model, CommStep::collective(kind, {iota(0, 8)}, 1 << 24)).seconds;
      EXPECT_GT(t8, t4) << name << " " << opKindName(kind);
    }
  }
}

TEST(CostModel, TrivialStepsCostNothingAndProgramsAddUp) {
  const CostModel model(preset("pcie-4080x8"));
  EXPECT_EQ(price(model, CommStep::collective(OpKind::AllReduce, {{3}}, 1 << 20)).seconds, 0.0);
  EXPECT_EQ(price(model, CommStep::manyToMany({{2, 2, 1 << 20}})).seconds, 0.0);
  EXPECT_EQ(price(model, CommStep::manyToMany({})).seconds, 0.0);
  const CommStep a = CommStep::collective(OpKind::AllGather, {iota(0, 4)}, 1 << 20);
  const CommStep b = CommStep::manyToMany({{0, 5, 1 << 20}});
  double total = 0;
  ASSERT_TRUE(model.predict({a, b}, total).isOk());
  EXPECT_DOUBLE_EQ(total, price(model, a).seconds + price(model, b).seconds);
}

TEST(CostModel, MalformedStepsAreRejectedWithTheirIndex) {
  const CostModel model(preset("pcie-4080x8"));
  StepCost cost;
  Status status = model.predictStep(CommStep::collective(OpKind::AllReduce, {{0, 1}, {1, 2}}, 64), cost);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("rank 1 appears twice"), std::string::npos) << status.message();
  status = model.predictStep(CommStep::collective(OpKind::AllGather, {{0, 1}, {2, 3, 4}}, 64), cost);
  EXPECT_NE(status.message().find("same size"), std::string::npos) << status.message();
  status = model.predictStep(CommStep::collective(OpKind::AllGather, {{0, 9}}, 64), cost);
  EXPECT_NE(status.message().find("rank 9 outside the 8 ranks"), std::string::npos) << status.message();
  status = model.predictStep(CommStep::collective(OpKind::ManyToMany, {{0, 1}}, 64), cost);
  EXPECT_NE(status.message().find("transfers, not groups"), std::string::npos) << status.message();
  status = model.predictStep(CommStep::collective(OpKind::AllToAll, {}, 64), cost);
  EXPECT_NE(status.message().find("at least one group"), std::string::npos) << status.message();
  double total = 0;
  status = model.predict({CommStep::manyToMany({{0, 1, 8}}), CommStep::manyToMany({{-1, 1, 8}})}, total);
  EXPECT_NE(status.message().find("step 1:"), std::string::npos) << status.message();
}

TEST(CostModel, InvalidTopologyFailsEveryPredictionWithTheReason) {
  Topology broken = roundHost(4);
  broken.local.bytesPerSecond = 0;
  StepCost cost;
  const Status status = CostModel(broken).predictStep(CommStep::collective(OpKind::AllGather, {iota(0, 4)}, 64), cost);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("bandwidth > 0"), std::string::npos) << status.message();
}

TEST(CostModel, StepKindNamesRoundTrip) {
  for (const OpKind kind : {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::AllToAll,
                            OpKind::Broadcast, OpKind::ManyToMany}) {
    OpKind parsed = OpKind::AllReduce;
    ASSERT_TRUE(parseStepKind(opKindName(kind), parsed).isOk());
    EXPECT_EQ(parsed, kind);
  }
  OpKind parsed = OpKind::AllReduce;
  const Status bad = parseStepKind("allscatter", parsed);
  EXPECT_NE(bad.message().find("allscatter"), std::string::npos);
}

TEST(CostModel, FormatSecondsPicksAReadableUnit) {
  EXPECT_EQ(formatSeconds(0.00084), "0.84 ms");
  EXPECT_EQ(formatSeconds(0.00171), "1.71 ms");
  EXPECT_EQ(formatSeconds(12.3e-6), "12.3 us");
  EXPECT_EQ(formatSeconds(2.5), "2.5 s");
}

}  // namespace
}  // namespace chimera
