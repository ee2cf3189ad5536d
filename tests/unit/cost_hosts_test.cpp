// SPDX-License-Identifier: Apache-2.0
// Topologies of ranks on several hosts: the domain of every rank for any placement, the
// host-network fabric, the launch topology ("hosts:...") and its cached calibration, and the
// planner's plans across hosts (a stage hand-off crosses the link with each byte at most once).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "chimera/backend.hpp"
#include "chimera/planning/calibration.hpp"
#include "chimera/planning/cost_model.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/planning/topology_cost.hpp"

namespace chimera {
namespace {

// Sets CHIMERA_TOPOLOGY_CACHE for the scope of a test, restoring the old value after.
class CacheDir {
 public:
  explicit CacheDir(const std::string& value) {
    if (const char* old = std::getenv("CHIMERA_TOPOLOGY_CACHE")) old_ = old;
    ::setenv("CHIMERA_TOPOLOGY_CACHE", value.c_str(), 1);
  }
  ~CacheDir() {
    if (old_.empty()) {
      ::unsetenv("CHIMERA_TOPOLOGY_CACHE");
    } else {
      ::setenv("CHIMERA_TOPOLOGY_CACHE", old_.c_str(), 1);
    }
  }
  CacheDir(const CacheDir&) = delete;
  CacheDir& operator=(const CacheDir&) = delete;

 private:
  std::string old_;
};

std::vector<int> blocks(int hosts, int perHost) {
  std::vector<int> out;
  for (int r = 0; r < hosts * perHost; ++r) out.push_back(r / perHost);
  return out;
}

std::vector<int> roundRobin(int hosts, int ranks) {
  std::vector<int> out;
  for (int r = 0; r < ranks; ++r) out.push_back(r % hosts);
  return out;
}

// The launch topology of `hosts` with the defaults (no cached calibration), its cross link
// at `crossBytesPerSecond` when given.
Topology launchTopology(const std::vector<int>& hosts, double crossBytesPerSecond = 0) {
  const CacheDir none("none");
  Topology t;
  const Status status = loadTopology(hostsTopologyName(hosts), t);
  EXPECT_TRUE(status.isOk()) << status.toString();
  if (crossBytesPerSecond > 0) t.cross.bytesPerSecond = crossBytesPerSecond;
  return t;
}

TEST(HostsTopology, BlocksBecomeRanksPerDomainAndAnyOtherPlacementListsTheDomains) {
  Topology t = launchTopology(blocks(2, 4));
  EXPECT_EQ(t.fabric, Fabric::HostNetwork);
  EXPECT_EQ(t.ranksPerDomain, 4);
  EXPECT_TRUE(t.domains.empty());
  EXPECT_EQ(domainOf(t, 5), 1);

  t = launchTopology(roundRobin(2, 8));
  EXPECT_EQ(t.ranksPerDomain, 0);
  EXPECT_EQ(t.domains, roundRobin(2, 8));
  EXPECT_EQ(domainOf(t, 5), 1);
  EXPECT_EQ(domainOf(t, 4), 0);
  EXPECT_EQ(domainCount(t), 2);

  t = launchTopology({0, 0, 0, 1, 1, 1, 1, 1});  // uneven: 3 + 5
  EXPECT_EQ(t.domains.size(), 8u);
  EXPECT_EQ(domainOf(t, 2), 0);
  EXPECT_EQ(domainOf(t, 3), 1);
  EXPECT_EQ(hostsLayoutKey(t.domains), "3+5");
  EXPECT_EQ(hostsLayoutKey(roundRobin(2, 8)), "4+4");
}

TEST(HostsTopology, OneHostStaysTheHostPresetAndSeveralNameEveryRanksHost) {
  EXPECT_EQ(hostsTopologyName(std::vector<int>(8, 0)), "host:8");
  EXPECT_EQ(hostsTopologyName(roundRobin(2, 4)), "hosts:0,1,0,1");
  EXPECT_EQ(launchTopology(roundRobin(2, 8)).name, "hosts:0,1,0,1,0,1,0,1");
  EXPECT_EQ(launchTopology(roundRobin(4, 64)).name, "hosts 16+16+16+16 (64 ranks)");  // explanations stay short
}

TEST(HostsTopology, AGroupsMembersByHostInTheOrderOfTheirFirstMember) {
  const std::vector<int> hosts = {2, 2, 0, 0, 0, 1, 1, 2};  // three hosts, not numbered by lowest rank
  using Members = std::vector<std::vector<int>>;
  EXPECT_EQ(membersByHost(std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}, hosts), (Members{{0, 1, 7}, {2, 3, 4}, {5, 6}}));
  // Positions in the group, not world ranks; the group's order, not the ranks'.
  EXPECT_EQ(membersByHost(std::vector<int>{7, 5, 2, 0}, hosts), (Members{{0, 3}, {1}, {2}}));
  // A rank past the placement's end is on host 0.
  EXPECT_EQ(membersByHost(std::vector<int>{2, 9}, hosts), (Members{{0, 1}}));
  EXPECT_TRUE(membersByHost({}, hosts).empty());
}

TEST(HostsTopology, MalformedPlacementsAreErrorsNamingTheProblem) {
  Topology t;
  Status status = loadTopology("hosts:0,,1", t);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("hosts:H0,H1"), std::string::npos) << status.message();
  status = loadTopology("hosts:1,0", t);  // hosts are numbered in the order of their lowest rank
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("domain 1 of rank 0"), std::string::npos) << status.message();

  t = launchTopology(blocks(2, 4));
  status = placeRanks(std::vector<int>{0, 1}, t);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("2 ranks"), std::string::npos) << status.message();

  Topology host;
  ASSERT_TRUE(loadTopology("host", host).isOk());
  EXPECT_FALSE(placeRanks(roundRobin(2, 8), host).isOk());  // one shared-memory domain
}

TEST(HostsTopology, ProfileRoundTripsTheDomainsAndOldProfilesStayReadable) {
  const Topology t = launchTopology({0, 1, 1, 0, 2, 2, 2, 1});
  Topology back;
  const Status read = topologyFromJson(topologyToJson(t), back);
  ASSERT_TRUE(read.isOk()) << read.toString();
  EXPECT_EQ(back.domains, t.domains);
  EXPECT_EQ(back.ranksPerDomain, 0);
  EXPECT_EQ(back.fabric, Fabric::HostNetwork);
  EXPECT_EQ(back.cross.bytesPerSecond, t.cross.bytesPerSecond);
  EXPECT_EQ(topologyToJson(back), topologyToJson(t));

  // Blocks keep the ranks_per_domain form that older profiles use.
  const Topology blocked = launchTopology(blocks(2, 4));
  const std::string text = topologyToJson(blocked);
  EXPECT_NE(text.find("\"ranks_per_domain\": 4"), std::string::npos);
  EXPECT_EQ(text.find("\"domains\""), std::string::npos);

  std::string both = text;
  both.replace(both.find("\"ranks_per_domain\": 4"), 21, "\"ranks_per_domain\": 4, \"domains\": [0,0,0,0,1,1,1,1]");
  Status status = topologyFromJson(both, back);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("not both"), std::string::npos) << status.message();

  std::string badList = text;
  badList.replace(badList.find("\"ranks_per_domain\": 4"), 21, "\"domains\": [0,1,\"x\",1,0,1,0,1]");
  status = topologyFromJson(badList, back);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("domains"), std::string::npos) << status.message();

  std::string shortList = text;
  shortList.replace(shortList.find("\"ranks_per_domain\": 4"), 21, "\"domains\": [0,1,0,1]");
  status = topologyFromJson(shortList, back);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("lists 4 ranks"), std::string::npos) << status.message();

  std::string unknown = text;
  unknown.replace(unknown.find("\"ranks_per_domain\": 4"), 21, "\"ranks_per_domain\": 4, \"hosts\": 2");
  status = topologyFromJson(unknown, back);
  EXPECT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("unknown field 'hosts'"), std::string::npos) << status.message();
}

TEST(HostsTopology, CachedCalibrationOfTheLayoutGivesTheLinksAndTheLaunchGivesThePlacement) {
  const std::string dir = fmt::format("{}chimera_cache_{}", ::testing::TempDir(), ::getpid());
  std::filesystem::create_directories(dir);
  Topology calibrated = launchTopology(blocks(2, 4));
  calibrated.name = "calibrated";
  calibrated.cross = {20e-6, 1.5e9};
  calibrated.calibration = {40, 0.05};
  {
    const CacheDir cache(dir);
    EXPECT_EQ(calibrationCachePath("4+4"), dir + "/hosts-4+4.json");
    ASSERT_TRUE(saveTopology(calibrated, calibrationCachePath("4+4")).isOk());
    Topology t;
    ASSERT_TRUE(loadTopology(hostsTopologyName(roundRobin(2, 8)), t).isOk());
    EXPECT_EQ(t.cross.bytesPerSecond, 1.5e9);  // the cached links
    EXPECT_EQ(t.domains, roundRobin(2, 8));    // this launch's placement
    EXPECT_EQ(t.calibration.samples, 40);
    ASSERT_TRUE(loadTopology(hostsTopologyName(std::vector<int>{0, 0, 0, 1, 1, 1, 1, 1}), t).isOk());
    EXPECT_EQ(t.cross.bytesPerSecond, launchTopology(blocks(2, 4)).cross.bytesPerSecond);  // 3+5: not cached

    std::ofstream(calibrationCachePath("4+4")) << "{ not json";
    const Status status = loadTopology(hostsTopologyName(blocks(2, 4)), t);
    EXPECT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("hosts-4+4.json"), std::string::npos) << status.message();
  }
  std::filesystem::remove_all(dir);
}

StepCost price(const Topology& t, const CommStep& step) {
  StepCost cost;
  const Status status = CostModel(t).predictStep(step, cost);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return cost;
}

// The cross link of a calibration across hosts is fitted to hand-offs alone (one round each):
// their latency and step grow together, so the step keeps the base's cost and the link's
// latency and bandwidth are recovered, whatever latency the base starts from.
TEST(HostsTopology, CalibrationRecoversTheCrossLinkFromHandOffsAlone) {
  const Topology base = launchTopology(blocks(2, 4));
  Topology truth = base;
  truth.cross = {120e-6, 0.11e9};
  const auto seconds = [](const Topology& topology, const CommStep& step) {
    StepCost cost;
    EXPECT_TRUE(CostModel(topology).predictStep(step, cost).isOk()) << step.toString();
    return cost.seconds;
  };
  std::vector<CalibrationSample> handOffs;
  for (const std::uint64_t bytes : {std::uint64_t{16} << 10, std::uint64_t{64} << 10, std::uint64_t{256} << 10}) {
    CalibrationSample sample{OpKind::ManyToMany, 8, 1, bytes, 0.0};
    sample.seconds = seconds(truth, sampleStep(sample));
    handOffs.push_back(sample);
  }
  const CommStep unseen = CommStep::manyToMany({{1, 5, 3 << 20}, {2, 6, 3 << 20}});
  for (const double seed : {base.cross.alphaSeconds, 1e-6}) {
    Topology start = base;
    start.cross.alphaSeconds = seed;
    Topology fitted;
    FitReport report;
    const Status status = fitProfile(start, handOffs, fitted, &report);
    ASSERT_TRUE(status.isOk()) << status.toString();
    EXPECT_TRUE(report.stepKept);
    EXPECT_EQ(fitted.stepSeconds, base.stepSeconds);
    EXPECT_NEAR(fitted.cross.alphaSeconds / truth.cross.alphaSeconds, 1.0, 1e-6);
    EXPECT_NEAR(seconds(fitted, unseen) / seconds(truth, unseen), 1.0, 1e-6);
  }
}

TEST(HostNetwork, HostsHaveTheirOwnBusAndShareOneNicPerDirection) {
  const Topology t = launchTopology(blocks(2, 4));
  const double bytes = 4 << 20;
  // One transfer inside host 0, and one inside each host at once: separate buses.
  const StepCost one = price(t, CommStep::manyToMany({{0, 1, 4 << 20}}));
  const StepCost two = price(t, CommStep::manyToMany({{0, 1, 4 << 20}, {4, 5, 4 << 20}}));
  EXPECT_DOUBLE_EQ(one.transferSeconds, two.transferSeconds);
  EXPECT_EQ(one.crossBytes, 0);
  // Four ranks of host 0 crossing at once share its NIC: four times one transfer.
  const StepCost single = price(t, CommStep::manyToMany({{0, 4, 4 << 20}}));
  const StepCost four =
      price(t, CommStep::manyToMany({{0, 4, 4 << 20}, {1, 5, 4 << 20}, {2, 6, 4 << 20}, {3, 7, 4 << 20}}));
  EXPECT_NEAR(four.transferSeconds, 4 * single.transferSeconds, 1e-12);
  EXPECT_EQ(single.bottleneck, "nic of host 0 tx");
  EXPECT_EQ(four.crossBytes, 4 * bytes);
  // Both directions at once: each has its own side of the NIC.
  const StepCost both = price(t, CommStep::manyToMany({{0, 4, 4 << 20}, {4, 0, 4 << 20}}));
  EXPECT_NEAR(both.transferSeconds, single.transferSeconds, 1e-12);
  EXPECT_GT(single.transferSeconds, 10 * one.transferSeconds);  // the network is the slow link
}

TEST(HostNetwork, CollectivesAcrossHostsRunHierarchicallyWhateverThePlacement) {
  const double bytes = 16 << 20;
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const CommStep allReduce = CommStep::collective(OpKind::AllReduce, {all}, 16 << 20);
  const StepCost inBlocks = price(launchTopology(blocks(2, 4)), allReduce);
  const StepCost roundRobinCost = price(launchTopology(roundRobin(2, 8)), allReduce);
  // Across on the quarter shard: 2 (H-1)/H of the tensor per host and direction, all 8 ranks 2x.
  EXPECT_DOUBLE_EQ(inBlocks.crossBytes, 2 * bytes);
  EXPECT_DOUBLE_EQ(roundRobinCost.crossBytes, 2 * bytes);
  EXPECT_NEAR(roundRobinCost.seconds, inBlocks.seconds, 1e-9);
  // A flat ring on blocks would cross with 2 (n-1)/n of the tensor each way: 3.5 tensors.
  const StepCost reduceScatter =
      price(launchTopology(roundRobin(2, 8)), CommStep::collective(OpKind::ReduceScatter, {all}, 16 << 20));
  EXPECT_DOUBLE_EQ(reduceScatter.crossBytes, bytes);
  const StepCost allGather =
      price(launchTopology(roundRobin(2, 8)), CommStep::collective(OpKind::AllGather, {all}, 2 << 20));
  EXPECT_DOUBLE_EQ(allGather.crossBytes, bytes);
  // A group inside one host never touches the network.
  const StepCost inside =
      price(launchTopology(blocks(2, 4)), CommStep::collective(OpKind::AllReduce, {{0, 1, 2, 3}}, 16 << 20));
  EXPECT_EQ(inside.crossBytes, 0);
  // AllToAll: every member sends to the n - c members on other hosts once.
  const StepCost allToAll =
      price(launchTopology({0, 0, 0, 1, 1, 1, 1, 1}), CommStep::collective(OpKind::AllToAll, {all}, 8 << 20));
  EXPECT_DOUBLE_EQ(allToAll.crossBytes, 2.0 * 3 * 5 * (1 << 20));
}

// The hierarchical collectives are priced as the backend runs them, pipelined over pieces: the
// crossing and the rounds inside the hosts overlap, so the slower side bounds the call and the
// faster adds one piece's share (pieces of at least 2 MiB of the AllReduce's or ReduceScatter's
// input or the AllGather's output, at most eight). Each phase is priced as the same collective
// over the host parts or over the lanes alone.
TEST(HostNetwork, HierarchicalCollectivesOverlapTheCrossingWithTheRoundsInsideTheHosts) {
  const Topology t = launchTopology(blocks(2, 4));
  const std::vector<std::vector<int>> all = {{0, 1, 2, 3, 4, 5, 6, 7}};
  const std::vector<std::vector<int>> hosts = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  const std::vector<std::vector<int>> lanes = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  const auto seconds = [&](OpKind kind, const std::vector<std::vector<int>>& groups, std::uint64_t bytes) {
    return price(t, CommStep::collective(kind, groups, bytes)).transferSeconds;
  };
  const auto pipelined = [](double inside, double crossing, std::uint64_t pieceBytes) {
    const double pieces = std::clamp<double>(static_cast<double>(pieceBytes >> 21), 1, 8);
    return std::max(inside, crossing) + std::min(inside, crossing) / pieces;
  };
  for (const std::uint64_t bytes : {std::uint64_t{1} << 20, std::uint64_t{16} << 20, std::uint64_t{64} << 20}) {
    // AllReduce: the host's reduction and spread; the lanes on a host's quarter. In pieces it
    // costs less than the two one after the other, never less than the crossing.
    const double allReduce = seconds(OpKind::AllReduce, all, bytes);
    const double allReduceInside = seconds(OpKind::AllReduce, hosts, bytes);
    const double allReduceCrossing = seconds(OpKind::AllReduce, lanes, bytes / 4);
    EXPECT_NEAR(allReduce, pipelined(allReduceInside, allReduceCrossing, bytes), 1e-9 * allReduce) << bytes;
    EXPECT_GE(allReduce, allReduceCrossing) << bytes;
    if (bytes >= (std::uint64_t{4} << 20)) {
      EXPECT_LT(allReduce, allReduceInside + allReduceCrossing) << bytes;
    }
    // ReduceScatter of `bytes` of input: inside on the whole, across on a host's quarter.
    const double reduceScatter = seconds(OpKind::ReduceScatter, all, bytes);
    EXPECT_NEAR(reduceScatter,
                pipelined(seconds(OpKind::ReduceScatter, hosts, bytes),
                          seconds(OpKind::ReduceScatter, lanes, bytes / 4), bytes),
                1e-9 * reduceScatter)
        << bytes;
    // AllGather of `bytes` / 8 per member: across on the blocks, inside on the hosts' gathered pairs.
    const double allGather = seconds(OpKind::AllGather, all, bytes / 8);
    EXPECT_NEAR(
        allGather,
        pipelined(seconds(OpKind::AllGather, hosts, bytes / 4), seconds(OpKind::AllGather, lanes, bytes / 8), bytes),
        1e-9 * allGather)
        << bytes;
  }
}

struct ChainCase {
  const char* name;
  const char* mesh;
  const char* from;
  const char* chain;
  const char* consume;
};

constexpr ChainCase kTpPp = {"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R"};
constexpr ChainCase kPpSp = {"pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R"};

struct Placed {
  ChainPlan plan;
  double chainLinkBytes = 0;
  double planLinkBytes = 0;
  double handOffLinkBytes = 0;  // of the plan's point-to-point steps: the stage hand-off
  double tensorBytes = 0;
};

// The bytes the point-to-point steps (send, many-to-many) of `plan` move across hosts.
double pointToPointLinkBytes(const CostModel& model, const Plan& plan) {
  CommProgram program;
  EXPECT_TRUE(planProgram(plan, program).isOk());
  double bytes = 0;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const auto kind = plan.steps[i].kind;
    if (kind != PlanStep::Kind::Send && kind != PlanStep::Kind::ManyToMany) continue;
    StepCost cost;
    EXPECT_TRUE(model.predictStep(program[i], cost).isOk());
    bytes += cost.crossBytes;
  }
  return bytes;
}

Placed planPlaced(const ChainCase& c, const Topology& topology, std::int64_t bytesPerRank) {
  Placed out;
  Mesh mesh;
  EXPECT_TRUE(Mesh::parse(c.mesh, topology.ranks, mesh).isOk());
  Layout from;
  Layout consume;
  Chain chain;
  EXPECT_TRUE(Layout::parse(c.from, mesh, from).isOk());
  EXPECT_TRUE(Layout::parse(c.consume, mesh, consume).isOk());
  EXPECT_TRUE(Chain::parse(c.chain, mesh, chain).isOk());
  TensorSpec spec;
  spec.dtype = DataType::F32;
  // Each rank starts with bytesPerRank: a sharded start holds 1/4 of the tensor.
  const std::int64_t rows = bytesPerRank / 4096 * (std::string(c.from).find("S0") != std::string::npos ? 4 : 1);
  spec.shape = {rows, 1024};
  out.tensorBytes = static_cast<double>(spec.bytes());
  const TopologyCost cost(topology);
  const Status planned = planChain(spec, from, chain, consume, cost, out.plan);
  EXPECT_TRUE(planned.isOk()) << planned.toString();
  EXPECT_TRUE(planLinkBytes(cost.model(), out.plan.baseline, out.chainLinkBytes).isOk());
  EXPECT_TRUE(planLinkBytes(cost.model(), out.plan.fused, out.planLinkBytes).isOk());
  out.handOffLinkBytes = pointToPointLinkBytes(cost.model(), out.plan.fused);
  return out;
}

// The stage hand-off crosses the hosts: whatever the placement, host count and link rate, the
// plan moves each byte of the tensor across the network at most once (the chain moves it once
// per rank of the far stage), and it is the plan the planner runs.
TEST(HostsPlanner, StageHandOffAcrossHostsCrossesTheLinkWithEachByteAtMostOnce) {
  struct Case {
    ChainCase chain;
    std::vector<int> hosts;
  };
  const std::vector<Case> cases = {
      {kTpPp, blocks(2, 4)},              // tp_pp, stage link across two hosts
      {kPpSp, roundRobin(2, 8)},          // pp_sp placed round-robin (--map-by node)
      {kPpSp, {0, 1, 0, 1, 0, 1, 0, 1}},  // the same, spelled out
      {kTpPp, {0, 0, 0, 0, 1, 1, 1, 1}},  // blocks
      {kPpSp, roundRobin(2, 16)},         // pp_sp with sp=8 over two hosts
      {kTpPp, blocks(2, 8)},              // tp=8 per stage, a host per stage
      {kPpSp, {0, 1, 0, 1, 0, 1, 2, 3}},  // a stage spread over three hosts
      {kTpPp, blocks(4, 2)},              // stages of two hosts each
  };
  for (const double crossRate : {0.25e9, 1.25e9, 3e9}) {
    for (const Case& c : cases) {
      ChainCase chain = c.chain;
      std::string meshText = chain.mesh;
      const auto ranks = static_cast<int>(c.hosts.size());
      if (ranks == 16) meshText = chain.name == std::string("tp_pp") ? "pp=2,tp=8" : "sp=8,pp=2";
      chain.mesh = meshText.c_str();
      const Topology topology = launchTopology(c.hosts, crossRate);
      const Placed placed = planPlaced(chain, topology, 16 << 20);
      SCOPED_TRACE(fmt::format("{} on hosts {} at {} B/s: chain {} B, plan {} B across ({} B hand-off), tensor {} B",
                               chain.name, fmt::join(c.hosts, ","), crossRate, placed.chainLinkBytes,
                               placed.planLinkBytes, placed.handOffLinkBytes, placed.tensorBytes));
      EXPECT_TRUE(placed.plan.useFused) << placed.plan.explain;
      EXPECT_GT(placed.handOffLinkBytes, 0);
      EXPECT_LE(placed.handOffLinkBytes, placed.tensorBytes * 1.0001) << placed.plan.fused.toString();
      EXPECT_LT(placed.planLinkBytes, placed.chainLinkBytes);
    }
  }
}

}  // namespace
}  // namespace chimera
