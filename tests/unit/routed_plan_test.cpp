// SPDX-License-Identifier: Apache-2.0
// The routed exchange's fusion rules and their prices: the expected distinct destination
// ranks, which rule is taken when (and not taken when it does not pay), the byte ratios of the
// issue's targets, and the errors of requests that do not fit the mesh.
#include <gtest/gtest.h>

#include "chimera/planning/cost_model.hpp"
#include "chimera/planning/routed_plan.hpp"
#include "chimera/planning/topology.hpp"

namespace chimera {
namespace {

RoutedRequest request(const char* meshText, const char* group, std::int64_t experts, int topK, std::int64_t hidden,
                      TokenPlacement placement = TokenPlacement::Owned, const char* tokenAxes = nullptr) {
  RoutedRequest r;
  EXPECT_TRUE(Mesh::parse(meshText, r.mesh).isOk());
  EXPECT_TRUE(r.mesh.parseAxes(group, r.group).isOk());
  if (tokenAxes != nullptr) {
    EXPECT_TRUE(r.mesh.parseAxes(tokenAxes, r.tokenAxes).isOk());
  }
  r.placement = placement;
  r.tokens = 4096;
  r.hidden = hidden;
  r.experts = experts;
  r.topK = topK;
  return r;
}

TEST(RoutedPlan, ExpectedDistinctRanksUnderUniformRouting) {
  EXPECT_NEAR(expectedDistinctRanks(64, 8, 8), 5.43, 0.01);
  EXPECT_NEAR(expectedDistinctRanks(64, 8, 2), 1.89, 0.01);
  EXPECT_NEAR(expectedDistinctRanks(8, 8, 2), 2.0, 1e-12);
  EXPECT_NEAR(expectedDistinctRanks(8, 8, 1), 1.0, 1e-12);
  EXPECT_NEAR(expectedDistinctRanks(64, 8, 64), 8.0, 1e-12);  // every expert: every rank
}

TEST(RoutedPlan, OncePerRankIsTakenWhenTokensShareRanks) {
  RoutedDecision d;
  ASSERT_TRUE(planRouted(request("ep=8", "ep", 64, 8, 1024), nullptr, d).isOk());
  EXPECT_TRUE(d.oncePerRank);
  // The target: >= 1.4x fewer bytes at (64, 8) uniform.
  EXPECT_GE(static_cast<double>(d.baseline.bytesPerRank) / static_cast<double>(d.fused.bytesPerRank), 1.4);
  ASSERT_EQ(d.explanation.size(), 1u);
  EXPECT_NE(d.explanation[0].find("taken"), std::string::npos);
}

TEST(RoutedPlan, RulesThatDoNotPayAreNotTaken) {
  RoutedDecision d;
  // K = 1: every token reaches one rank either way; equal cost keeps the chain as issued.
  ASSERT_TRUE(planRouted(request("ep=8", "ep", 8, 1, 1024), nullptr, d).isOk());
  EXPECT_FALSE(d.oncePerRank);
  // Rows of 4 elements: the larger record headers outweigh the rows saved.
  ASSERT_TRUE(planRouted(request("ep=4", "ep", 8, 2, 4), nullptr, d).isOk());
  EXPECT_FALSE(d.oncePerRank);
  EXPECT_NE(d.explanation[0].find("not taken"), std::string::npos);
}

TEST(RoutedPlan, ReplicasSplitAndPartialTokensReduceScatter) {
  RoutedDecision d;
  // Against the TP-replicated chain at tp=2 (every replica dispatching): the split halves the
  // dispatch, and the AllGather that keeps the output replicated costs (tp-1)/tp T H b.
  ASSERT_TRUE(
      planRouted(request("tp=2,ep=4", "ep+tp", 64, 8, 1024, TokenPlacement::Replicated, "tp"), nullptr, d).isOk());
  EXPECT_TRUE(d.splitReplicas);
  EXPECT_GE(static_cast<double>(d.baseline.bytesPerRank) / static_cast<double>(d.fused.bytesPerRank), 2.0);
  ASSERT_TRUE(
      planRouted(request("tp=2,ep=4", "ep+tp", 64, 2, 1024, TokenPlacement::Replicated, "tp"), nullptr, d).isOk());
  EXPECT_TRUE(d.splitReplicas);
  EXPECT_GE(static_cast<double>(d.baseline.bytesPerRank) / static_cast<double>(d.fused.bytesPerRank), 1.6);
  ASSERT_TRUE(planRouted(request("tp=2,ep=4", "ep", 64, 2, 1024, TokenPlacement::Partial, "tp"), nullptr, d).isOk());
  EXPECT_TRUE(d.splitReplicas);
  EXPECT_EQ(d.fused.program.front().kind, OpKind::ReduceScatter);
  EXPECT_EQ(d.baseline.program.front().kind, OpKind::AllReduce);
  EXPECT_LT(d.fused.bytesPerRank, d.baseline.bytesPerRank);
}

TEST(RoutedPlan, TopologyCostDecides) {
  Topology topology;
  ASSERT_TRUE(loadTopology("pcie-4080x8", topology).isOk());
  const CostModel model(topology);
  RoutedDecision d;
  ASSERT_TRUE(planRouted(request("ep=8", "ep", 64, 8, 1024), &model, d).isOk());
  EXPECT_TRUE(d.oncePerRank);
  EXPECT_LT(d.fused.seconds, d.baseline.seconds);
  EXPECT_GT(d.baseline.seconds, 0);
}

// Rule 5, a stage's tokens straight to the next stage's experts: by bytes it pays where the
// busiest rank of the hand-off program (stage k+1, dispatching and combining within its group:
// 2 D (R-1)/R T H b) sends more than a stage-k rank straight (D T H b), i.e. R > 2; on a
// topology whose stage link is the slow shared one it loses: the stage link carries D rows per
// token instead of one.
TEST(RoutedPlan, StageStraightPaysUnlessTheStageLinkIsSlow) {
  RoutedDecision d;
  RoutedRequest r = request("pp=2,ep=4", "ep", 64, 8, 1024, TokenPlacement::Stage, "pp");
  ASSERT_TRUE(planRouted(r, nullptr, d).isOk());
  EXPECT_TRUE(d.straightFromStage);
  EXPECT_LT(d.fused.bytesPerRank, d.baseline.bytesPerRank);
  ASSERT_EQ(d.explanation.size(), 2u);
  EXPECT_NE(d.explanation[1].find("straight from the stage"), std::string::npos) << d.explanation[1];
  EXPECT_EQ(d.baseline.program.front().kind, OpKind::ManyToMany);  // the hand-off
  // Two expert ranks per stage: the hand-off's dispatch and combine move half their rows off-rank.
  ASSERT_TRUE(planRouted(request("pp=2,ep=2", "ep", 64, 8, 1024, TokenPlacement::Stage, "pp"), nullptr, d).isOk());
  EXPECT_FALSE(d.straightFromStage);
  EXPECT_NE(d.explanation[1].find("not taken"), std::string::npos) << d.explanation[1];
  // pcie-4080x8: stage 0 on one NUMA domain, stage 1 on the other, joined by one shared link.
  Topology topology;
  ASSERT_TRUE(loadTopology("pcie-4080x8", topology).isOk());
  const CostModel model(topology);
  ASSERT_TRUE(planRouted(r, &model, d).isOk());
  EXPECT_FALSE(d.straightFromStage) << d.explanation[1];
  // The last stage has no next one; the pipeline axis cannot be part of the dispatch group.
  r.stage = 1;
  EXPECT_EQ(planRouted(r, nullptr, d).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(planRouted(request("pp=2,ep=4", "ep+pp", 64, 8, 1024, TokenPlacement::Stage, "pp"), nullptr, d).code(),
            StatusCode::InvalidArgument);
}

// Rule 6, once per destination host: priced only where the dispatch group spans hosts, and
// taken on the host-network topology of the placement at (64, 8) uniform, where a token reaches
// 2.7 of the other host's 4 ranks but crosses once; not where every token reaches one rank of
// a host (K = 1: rule 1 is not taken either), nor on one host's topology, which prices both
// hops' links alike (the forwarding only adds bytes there).
// A stage's tokens (pp=@k) whose next stage spans hosts: the hand-off, then stage k+1's dispatch
// once per destination host, is priced against the straight dispatch as well and taken where it
// pays; not where stage k+1 has one rank alone on a host (uneven 5 + 3: the ranks of the other
// host each reach it once per token either way, and that direction of the link is the busier),
// and not priced where stage k+1 sits on one host (the stages in blocks).
TEST(RoutedPlan, AStagesTokensCrossOncePerHostAfterTheHandOff) {
  const struct {
    std::vector<int> hosts;
    bool taken;
  } placements[] = {{{0, 1, 0, 1, 0, 1, 0, 1}, true},
                    {{0, 0, 1, 1, 0, 0, 1, 1}, true},
                    {{0, 0, 0, 0, 1, 1, 2, 2}, true},
                    {{0, 0, 0, 0, 0, 1, 1, 1}, false}};
  for (const auto& p : placements) {
    std::string name = "hosts:";
    for (std::size_t i = 0; i < p.hosts.size(); ++i) name += (i > 0 ? "," : "") + std::to_string(p.hosts[i]);
    Topology topology;
    ASSERT_TRUE(loadTopology(name, topology).isOk()) << name;
    const CostModel model(topology);
    RoutedRequest r = request("pp=2,ep=4", "ep", 64, 8, 1024, TokenPlacement::Stage, "pp");
    r.hosts = p.hosts;
    RoutedDecision d;
    ASSERT_TRUE(planRouted(r, &model, d).isOk());
    std::string why;
    for (const std::string& line : d.explanation) why += line + "; ";
    ASSERT_EQ(d.explanation.size(), 3u) << name << ": " << why;
    EXPECT_TRUE(d.oncePerRank) << name << ": " << why;
    EXPECT_EQ(d.oncePerHost, p.taken) << name << ": " << why;
    if (p.taken) {
      EXPECT_FALSE(d.straightFromStage) << name << ": " << why;
      EXPECT_EQ(d.fused.name, "once per host, after the stage hand-off");
    }
  }
  // Stage 1 on one host: no rule 6 to price.
  RoutedRequest r = request("pp=2,ep=4", "ep", 64, 8, 1024, TokenPlacement::Stage, "pp");
  r.hosts = {0, 0, 0, 0, 1, 1, 1, 1};
  Topology topology;
  ASSERT_TRUE(loadTopology("hosts:0,0,0,0,1,1,1,1", topology).isOk());
  const CostModel model(topology);
  RoutedDecision d;
  ASSERT_TRUE(planRouted(r, &model, d).isOk());
  EXPECT_FALSE(d.oncePerHost);
  EXPECT_EQ(d.explanation.size(), 2u);
}

TEST(RoutedPlan, OncePerHostPaysWhereTheGroupSpansHosts) {
  for (const std::vector<int>& hosts :
       {std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}, std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1},
        std::vector<int>{0, 0, 0, 1, 1, 1, 1, 1}}) {
    RoutedRequest r = request("ep=8", "ep", 64, 8, 1024);
    r.hosts = hosts;
    std::string name = "hosts:";
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      if (i > 0) name += ',';
      name += std::to_string(hosts[i]);
    }
    Topology topology;
    ASSERT_TRUE(loadTopology(name, topology).isOk()) << name;
    const CostModel model(topology);
    RoutedDecision d;
    ASSERT_TRUE(planRouted(r, &model, d).isOk());
    EXPECT_TRUE(d.oncePerRank);
    EXPECT_TRUE(d.oncePerHost) << name << ": " << d.explanation.back();
    ASSERT_EQ(d.explanation.size(), 2u);
    EXPECT_NE(d.explanation[1].find("once per destination host"), std::string::npos) << d.explanation[1];
    EXPECT_NE(d.fused.name.find("once per host"), std::string::npos);
    // What crosses the hosts: the predicted program moves at least 2x fewer bytes between them.
    RoutedRequest oneHost = r;
    RoutedDecision perRank;
    oneHost.hosts.clear();
    ASSERT_TRUE(planRouted(oneHost, &model, perRank).isOk());
    EXPECT_FALSE(perRank.oncePerHost);
    ASSERT_EQ(perRank.explanation.size(), 1u);  // not priced without hosts
    double crossHost = 0, crossRank = 0;
    for (const CommStep& step : d.fused.program) {
      StepCost cost;
      ASSERT_TRUE(model.predictStep(step, cost).isOk());
      crossHost += cost.crossBytes;
    }
    for (const CommStep& step : perRank.fused.program) {
      StepCost cost;
      ASSERT_TRUE(model.predictStep(step, cost).isOk());
      crossRank += cost.crossBytes;
    }
    EXPECT_GE(crossRank / crossHost, 2.0) << name << ": " << crossRank << " vs " << crossHost;
    // K = 1: a token reaches one rank; nothing to share.
    RoutedRequest single = request("ep=8", "ep", 64, 1, 1024);
    single.hosts = hosts;
    ASSERT_TRUE(planRouted(single, &model, d).isOk());
    EXPECT_FALSE(d.oncePerHost);
    // One host's model: the forwarding is priced as extra bytes on links like any other.
    Topology host;
    ASSERT_TRUE(loadTopology("host:8", host).isOk());
    const CostModel flat(host);
    ASSERT_TRUE(planRouted(r, &flat, d).isOk());
    EXPECT_FALSE(d.oncePerHost) << d.explanation.back();
  }
  // A group inside one host (ep within each host of blocks) prices no rule 6.
  RoutedRequest r = request("dp=2,ep=4", "ep", 64, 8, 1024);
  r.hosts = {0, 0, 0, 0, 1, 1, 1, 1};
  RoutedDecision d;
  ASSERT_TRUE(planRouted(r, nullptr, d).isOk());
  EXPECT_FALSE(d.oncePerHost);
  EXPECT_EQ(d.explanation.size(), 1u);
}

TEST(RoutedPlan, RequestsThatDoNotFitAreErrors) {
  RoutedDecision d;
  EXPECT_EQ(planRouted(request("ep=8", "ep", 12, 2, 64), nullptr, d).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(planRouted(request("ep=8", "ep", 8, 9, 64), nullptr, d).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(
      planRouted(request("dp=2,tp=2,ep=2", "ep+tp", 8, 2, 64, TokenPlacement::Replicated, "dp+tp"), nullptr, d).code(),
      StatusCode::InvalidArgument);
}

}  // namespace
}  // namespace chimera
