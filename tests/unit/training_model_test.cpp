// SPDX-License-Identifier: Apache-2.0
// Whole-model analysis: configurations and their errors, the collectives one iteration
// issues (counted by hand for a small model), byte counts against the chain formulas, and
// the iteration arithmetic (compute + communication, fused never slower than baseline).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "chimera/planning/routed_plan.hpp"
#include "chimera/planning/training_model.hpp"

namespace chimera {
namespace {

Topology preset(const char* name) {
  Topology t;
  EXPECT_TRUE(loadTopology(name, t).isOk()) << name;
  return t;
}

ModelConfig tiny(int layers) {
  ModelConfig m;
  m.name = "tiny";
  m.layers = layers;
  m.hidden = 256;
  m.heads = 4;
  m.seqLength = 128;
  m.microBatch = 2;
  return m;
}

ModelReport analyse(const ModelConfig& m, const char* parallel, const char* topology) {
  ParallelConfig p;
  EXPECT_TRUE(parseParallelConfig(parallel, p).isOk()) << parallel;
  ModelReport r;
  const Status status = analyzeModel(m, p, preset(topology), r);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return r;
}

TEST(TrainingModel, BuiltInModelsAndJsonFiles) {
  ModelConfig m;
  ASSERT_TRUE(loadModelConfig("gpt2-medium", m).isOk());
  EXPECT_EQ(m.layers, 24);
  EXPECT_EQ(m.hidden, 1024);
  EXPECT_EQ(m.heads, 16);
  EXPECT_EQ(m.seqLength, 1024);
  EXPECT_EQ(m.experts, 0);
  ASSERT_TRUE(loadModelConfig("gpt-moe", m).isOk());
  EXPECT_EQ(m.experts, 8);
  EXPECT_EQ(m.topK, 2);
  const std::string path = ::testing::TempDir() + "chimera_model_test.json";
  {
    std::ofstream file(path);
    file << R"({"format": "chimera-model-1", "name": "mine", "layers": 4, "hidden": 512, "heads": 8,
               "seq_length": 256, "dtype": "f16", "experts": 4, "top_k": 1})";
  }
  ASSERT_TRUE(loadModelConfig(path, m).isOk());
  EXPECT_EQ(m.name, "mine");
  EXPECT_EQ(m.dtype, DataType::F16);
  EXPECT_EQ(m.experts, 4);
  {
    std::ofstream file(path);
    file << R"({"format": "chimera-model-1", "name": "x", "layers": 4, "hidden": 512, "heads": 8,
               "seq_length": 256, "hiden": 3})";
  }
  Status status = loadModelConfig(path, m);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("unknown field 'hiden'"), std::string::npos) << status.message();
  std::remove(path.c_str());
  status = loadModelConfig("no-such-model", m);
  EXPECT_NE(status.message().find("gpt2-medium"), std::string::npos) << status.message();
}

TEST(TrainingModel, ParallelConfigAndSplitErrorsNameTheProblem) {
  ParallelConfig p;
  ASSERT_TRUE(parseParallelConfig("dp=2,tp=4,sp=4,pp=2,microbatches=8", p).isOk());
  EXPECT_EQ(p.ranks(), 16);
  EXPECT_EQ(p.microbatches, 8);
  EXPECT_NE(parseParallelConfig("tq=2", p).message().find("'tq'"), std::string::npos);
  EXPECT_FALSE(parseParallelConfig("tp=0", p).isOk());
  ModelConfig m = tiny(4);
  ASSERT_TRUE(parseParallelConfig("tp=4,sp=2", p).isOk());
  EXPECT_NE(validateModel(m, p, preset("dgx-h100x8")).message().find("sp=2 must be 1 or equal tp=4"),
            std::string::npos);
  ASSERT_TRUE(parseParallelConfig("tp=4,pp=4", p).isOk());
  const Status big = validateModel(m, p, preset("dgx-h100x8"));
  EXPECT_NE(big.message().find("needs 16 GPUs"), std::string::npos) << big.message();
  EXPECT_NE(big.message().find("has 8"), std::string::npos) << big.message();
  ASSERT_TRUE(parseParallelConfig("pp=3", p).isOk());
  EXPECT_NE(validateModel(m, p, preset("dgx-h100x8")).message().find("not divisible by pp=3"), std::string::npos);
  ASSERT_TRUE(parseParallelConfig("tp=2", p).isOk());
  EXPECT_NE(validateModel(m, p, preset("host")).message().find("no device peak"), std::string::npos);
}

TEST(TrainingModel, TensorAndSequenceParallelLayersIssueTheMegatronCollectives) {
  // 2 layers, tp=sp=2, pp=2, 2 micro-batches: per layer 4 AllGathers (attention and MLP
  // inputs forward, outputs backward) and 4 AllReduce-then-slice; the stage hand-offs
  // extend layer 0's last forward chain and layer 1's last backward chain.
  const ModelReport r = analyse(tiny(2), "tp=2,sp=2,pp=2,microbatches=2", "dgx-h100x8");
  ASSERT_EQ(r.collectives.size(), 16u);
  int gathers = 0, reduces = 0, sends = 0;
  for (const ModelCollective& c : r.collectives) {
    EXPECT_EQ(c.count, 2) << c.where;
    gathers += c.chain == "allgather:tp:0" ? 1 : 0;
    reduces += c.chain.rfind("allreduce:tp,slice:tp:0", 0) == 0 ? 1 : 0;
    sends += c.chain.find("send:pp") != std::string::npos ? 1 : 0;
    EXPECT_LE(c.fusedSeconds, c.baselineSeconds) << c.where;
    EXPECT_LE(c.fusedBytes, c.baselineBytes) << c.where;
  }
  EXPECT_EQ(gathers, 8);
  EXPECT_EQ(reduces, 8);
  EXPECT_EQ(sends, 2);
  // AllReduce then keep own half (tp=2) sends L per rank on 2 ranks; the ReduceScatter L/2.
  const std::int64_t activation = 128 * 2 * 256 * 2;  // tokens x hidden x bf16
  for (const ModelCollective& c : r.collectives) {
    if (c.chain != "allreduce:tp,slice:tp:0") continue;
    EXPECT_EQ(c.baselineBytes, 2 * activation) << c.where;
    EXPECT_TRUE(c.fused) << c.where;
    EXPECT_EQ(c.fusedBytes, activation) << c.where;
  }
}

TEST(TrainingModel, IterationAddsComputeAndCommunicationOnTheCriticalPath) {
  const ModelReport r = analyse(tiny(4), "dp=2,tp=2,sp=2,pp=2,microbatches=4", "dgx-h100x8");
  EXPECT_GT(r.computeSeconds, 0);
  EXPECT_NEAR(r.baselineIterationSeconds, r.computeSeconds + r.baselineCommSeconds, 1e-12);
  EXPECT_NEAR(r.fusedIterationSeconds, r.computeSeconds + r.fusedCommSeconds, 1e-12);
  EXPECT_LE(r.fusedIterationSeconds, r.baselineIterationSeconds);
  EXPECT_GT(r.endToEndSpeedup(), 1.0);
  EXPECT_GT(r.communicationSpeedup(), r.endToEndSpeedup());
  ASSERT_EQ(r.layers.size(), 4u);
  EXPECT_EQ(r.layers[3].stage, 1);
  bool gradients = false;
  for (const ModelCollective& c : r.collectives) gradients = gradients || c.chain == "allreduce:dp";
  EXPECT_TRUE(gradients);
  // More micro-batches: compute and communication grow with the 1F1B slots (m + pp - 1).
  const ModelReport more = analyse(tiny(4), "dp=2,tp=2,sp=2,pp=2,microbatches=8", "dgx-h100x8");
  EXPECT_NEAR(more.computeSeconds / r.computeSeconds, 9.0 / 5.0, 1e-9);
}

// C(n, k) in exact integers (small arguments).
double binomial(int n, int k) {
  std::uint64_t c = 1;
  for (int i = 1; i <= k; ++i) c = c * static_cast<std::uint64_t>(n - k + i) / static_cast<std::uint64_t>(i);
  return static_cast<double>(c);
}

TEST(TrainingModel, ExpectedDistinctRanksOfTopKRouting) {
  // D = R (1 - C(E - E/R, K) / C(E, K)), the binomials counted here in integers.
  EXPECT_DOUBLE_EQ(expectedDistinctRanks(64, 8, 8), 8 * (1 - binomial(56, 8) / binomial(64, 8)));
  EXPECT_NEAR(expectedDistinctRanks(64, 8, 8), 5.43, 0.005);
  EXPECT_DOUBLE_EQ(expectedDistinctRanks(64, 8, 2), 8.0 * 476 / 2016);  // 8 (1 - 1540/2016)
  EXPECT_NEAR(expectedDistinctRanks(64, 8, 2), 1.89, 0.005);
  EXPECT_DOUBLE_EQ(expectedDistinctRanks(8, 8, 2), 2.0);  // one expert per rank: K ranks
  EXPECT_DOUBLE_EQ(expectedDistinctRanks(64, 8, 1), 1.0);
  EXPECT_DOUBLE_EQ(expectedDistinctRanks(8, 1, 2), 1.0);
  EXPECT_DOUBLE_EQ(expectedDistinctRanks(8, 8, 8), 8.0);    // every expert: every rank
  EXPECT_DOUBLE_EQ(expectedDistinctRanks(16, 4, 13), 4.0);  // more than 3 blocks' worth: all ranks
}

ModelConfig tinyMoe(int experts, int topK) {
  ModelConfig m = tiny(2);
  m.experts = experts;
  m.topK = topK;
  m.moeEvery = 2;  // layer 1 is MoE
  return m;
}

// A layer big enough that bandwidth, not latency, sets the exchange times: 8192 tokens.
ModelConfig largeMoe(int experts, int topK) {
  ModelConfig m = tinyMoe(experts, topK);
  m.seqLength = 1024;
  m.microBatch = 8;
  return m;
}

const ModelCollective& find(const ModelReport& r, const std::string& where) {
  for (const ModelCollective& c : r.collectives) {
    if (c.where == where) return c;
  }
  ADD_FAILURE() << "no collective '" << where << "'";
  return r.collectives.front();
}

TEST(TrainingModel, MoeDispatchSendsEachTokenOncePerDestinationRank) {
  // ep=4: n = 4 ranks, T = 128 x 2 = 256 tokens each, rows of 256 bf16 = 512 bytes, 8
  // experts top-2: D = 4 (1 - C(6,2)/C(8,2)) = 13/7.
  const ModelReport r = analyse(tinyMoe(8, 2), "ep=4,microbatches=1", "dgx-h100x8");
  const double n = 4, t = 256, row = 512, d = 4.0 * 13 / 28;
  EXPECT_DOUBLE_EQ(r.moe.distinctRanks, d);
  EXPECT_EQ(r.moe.ranks, 4);
  EXPECT_EQ(r.moe.tokensPerRank, 256);
  EXPECT_EQ(r.moe.perExpertBytes, 256 * 2 * 3 / 4 * 512);
  EXPECT_EQ(r.moe.allGatherBytes, 3 * 256 * 512);
  EXPECT_EQ(r.moe.routedBytes, std::llround(t * d * 0.75 * row));
  const std::int64_t counts = 3 * 4 * 8;  // the forward dispatch's count exchange: 4 E bytes per rank
  const ModelCollective& dispatch = find(r, "layer 1 moe dispatch (forward)");
  // All 4 ranks: K f rows per token as issued, D f rows per token routed (rounded per transfer).
  EXPECT_EQ(dispatch.baselineBytes, static_cast<std::int64_t>(n * t * 2 * 0.75 * row) + counts);
  EXPECT_TRUE(dispatch.fused);
  EXPECT_NEAR(static_cast<double>(dispatch.fusedBytes), n * t * d * 0.75 * row + counts, 12);
  EXPECT_LT(dispatch.fusedSeconds, dispatch.baselineSeconds);
  // Combine and the backward exchanges: the same rows back, no count exchange.
  for (const char* where :
       {"layer 1 moe combine (forward)", "layer 1 moe dispatch (backward)", "layer 1 moe combine (backward)"}) {
    const ModelCollective& c = find(r, where);
    EXPECT_EQ(c.baselineBytes, static_cast<std::int64_t>(n * t * 2 * 0.75 * row)) << where;
    EXPECT_NEAR(static_cast<double>(c.fusedBytes), n * t * d * 0.75 * row, 12) << where;
  }
  EXPECT_TRUE(r.layers[1].moe);
  EXPECT_FALSE(r.layers[0].moe);
  // Top-1: D = K = 1, nothing to save; the routed exchange is never priced above the baseline.
  const ModelReport top1 = analyse(tinyMoe(8, 1), "ep=4,microbatches=1", "dgx-h100x8");
  const ModelCollective& one = find(top1, "layer 1 moe dispatch (forward)");
  EXPECT_FALSE(one.fused);
  EXPECT_EQ(one.fusedBytes, one.baselineBytes);
}

// Lines of a plan (one step each).
int planSteps(const ModelCollective& c) {
  int lines = 0;
  for (char ch : c.plan) lines += ch == '\n' ? 1 : 0;
  return lines;
}

TEST(TrainingModel, MoeAcrossNodesSendsATokenOncePerDestinationNode) {
  // ep=16 over two nodes of 8 (multinode-ib:2), 64 experts top-8: a token reaches D = 6.75 of
  // the 16 ranks, 3.4 on the other node, which once per host it crosses to once (P_h = 0.998
  // of the time), to the forwarder with its place there, which fans it out (docs/moe.md, rule 6).
  const ModelReport r = analyse(largeMoe(64, 8), "ep=16,microbatches=1", "multinode-ib:2");
  const double n = 16, t = static_cast<double>(r.moe.tokensPerRank), row = 512, d = r.moe.distinctRanks;
  const double perRank = t * d / n;  // rows to each destination rank
  const double hit = expectedHit(64, 32, 8);
  const ModelCollective& dispatch = find(r, "layer 1 moe dispatch (forward)");
  EXPECT_TRUE(dispatch.fused);
  EXPECT_EQ(planSteps(dispatch), 3) << dispatch.plan;  // counts, straight + across, the fan-out
  // Every rank: 7 straight records inside its node, one host record per token to its
  // forwarder with probability P_h, and (as forwarder of one source) 7 fanned-out records.
  const double counts = 15 * 4 * 64;
  EXPECT_NEAR(static_cast<double>(dispatch.fusedBytes), n * (7 * perRank + t * hit + 7 * perRank) * row + counts,
              3 * 16 * 15);
  // Across the nodes: t P_h rows per rank instead of 8 D / 16 t: 3.4x fewer.
  EXPECT_NEAR(8 * perRank / (t * hit), 3.38, 0.01);
  for (const char* where :
       {"layer 1 moe combine (forward)", "layer 1 moe dispatch (backward)", "layer 1 moe combine (backward)"}) {
    const ModelCollective& c = find(r, where);
    EXPECT_TRUE(c.fused) << where;
    EXPECT_EQ(planSteps(c), 2) << where << ": " << c.plan;
    EXPECT_NEAR(static_cast<double>(c.fusedBytes), n * (14 * perRank + t * hit) * row, 3 * 16 * 15) << where;
  }
  // On one node there is nothing to cross: once per rank, one many-to-many after the counts.
  const ModelReport one = analyse(largeMoe(64, 8), "ep=8,microbatches=1", "dgx-h100x8");
  EXPECT_EQ(planSteps(find(one, "layer 1 moe dispatch (forward)")), 2);
  // Top-1 across the nodes: a token crosses to one rank, so once per host crosses as much and
  // adds the fan-out: not taken.
  const ModelReport top1 = analyse(largeMoe(64, 1), "ep=16,microbatches=1", "multinode-ib:2");
  EXPECT_LE(planSteps(find(top1, "layer 1 moe dispatch (forward)")), 2);
}

TEST(TrainingModel, MoeAllGatherDispatcherSendsEveryTokenToEveryRank) {
  ModelConfig m = largeMoe(8, 2);
  m.dispatcher = MoeDispatcher::AllGather;
  // tp=2, ep=2 folded: n = 4 ranks, T = 8192 / 2 tokens each. (On NVSwitch at this size the
  // forward dispatch's count exchange, a latency the AllGather does not pay, evens it out.)
  const ModelReport r = analyse(m, "tp=2,sp=2,ep=2,microbatches=1", "pcie-4080x8");
  const std::int64_t t = 4096, row = 512;
  const ModelCollective& dispatch = find(r, "layer 1 moe dispatch (forward)");
  EXPECT_EQ(dispatch.chain, "allgather:ep+tp:0");
  EXPECT_EQ(dispatch.baselineBytes, 4 * 3 * t * (row + 2 * 12));  // tokens + ids and weights
  const ModelCollective& combine = find(r, "layer 1 moe combine (forward)");
  EXPECT_EQ(combine.chain, "reducescatter:ep+tp:0");
  EXPECT_EQ(combine.baselineBytes, 3 * 4 * t * row);
  EXPECT_TRUE(dispatch.fused);
  EXPECT_TRUE(combine.fused);
  // D f = 13/7 x 3/4 rows per token routed vs n - 1 = 3 gathered.
  EXPECT_NEAR(static_cast<double>(combine.fusedBytes), 4.0 * t * (13.0 / 7) * 0.75 * row, 12);
}

TEST(TrainingModel, MoeImbalanceBoundsTheExchangeAndTheExpertsByTheMostLoadedRank) {
  ModelConfig m = largeMoe(8, 2);
  const ModelReport balanced = analyse(m, "ep=4,microbatches=1", "pcie-4080x8");
  m.imbalance = 3;
  const ModelReport skewed = analyse(m, "ep=4,microbatches=1", "pcie-4080x8");
  EXPECT_EQ(skewed.moe.imbalance, 3);
  const ModelCollective& a = find(balanced, "layer 1 moe dispatch (forward)");
  const ModelCollective& b = find(skewed, "layer 1 moe dispatch (forward)");
  // The same bytes in all (rounding per transfer aside), more of them into one rank.
  EXPECT_NEAR(static_cast<double>(b.baselineBytes), static_cast<double>(a.baselineBytes), 12);
  EXPECT_NEAR(static_cast<double>(b.fusedBytes), static_cast<double>(a.fusedBytes), 12);
  EXPECT_GT(b.baselineSeconds, 1.5 * a.baselineSeconds);
  EXPECT_GT(b.fusedSeconds, 1.5 * a.fusedSeconds);
  EXPECT_GT(skewed.layers[1].computeSeconds, balanced.layers[1].computeSeconds);
  EXPECT_EQ(skewed.layers[0].computeSeconds, balanced.layers[0].computeSeconds);
  // At most every row into one rank: imbalance <= n.
  m.imbalance = 4.5;
  ParallelConfig p;
  ASSERT_TRUE(parseParallelConfig("ep=4", p).isOk());
  const Status status = validateModel(m, p, preset("dgx-h100x8"));
  EXPECT_NE(status.message().find("imbalance 4.5"), std::string::npos) << status.message();
}

TEST(TrainingModel, MoeFieldsOfTheModelFile) {
  const std::string path = ::testing::TempDir() + "chimera_model_moe_test.json";
  {
    std::ofstream file(path);
    file << R"({"format": "chimera-model-1", "name": "m", "layers": 2, "hidden": 256, "heads": 4,
               "seq_length": 128, "experts": 64, "top_k": 8, "imbalance": 2.5, "dispatcher": "allgather"})";
  }
  ModelConfig m;
  ASSERT_TRUE(loadModelConfig(path, m).isOk());
  EXPECT_EQ(m.topK, 8);
  EXPECT_EQ(m.imbalance, 2.5);
  EXPECT_EQ(m.dispatcher, MoeDispatcher::AllGather);
  {
    std::ofstream file(path);
    file << R"({"format": "chimera-model-1", "name": "m", "layers": 2, "hidden": 256, "heads": 4,
               "seq_length": 128, "experts": 8, "dispatcher": "deepep"})";
  }
  const Status status = loadModelConfig(path, m);
  EXPECT_NE(status.message().find("'deepep' is not one of alltoall, allgather"), std::string::npos) << status.message();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace chimera
