// SPDX-License-Identifier: Apache-2.0
// Whole-model analysis: configurations and their errors, the collectives one iteration
// issues (counted by hand for a small model), byte counts against the chain formulas, and
// the iteration arithmetic (compute + communication, fused never slower than baseline).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

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

TEST(TrainingModel, MoeLayersDispatchAndCombineOverTheExpertGroup) {
  ModelConfig m = tiny(2);
  m.experts = 4;
  m.topK = 2;
  m.moeEvery = 2;  // layer 1 is MoE
  const ModelReport r = analyse(m, "tp=2,ep=2,microbatches=1", "dgx-h100x8");
  int dispatch = 0;
  for (const ModelCollective& c : r.collectives) {
    if (c.chain != "alltoall:ep+tp:0:1") continue;
    ++dispatch;
    EXPECT_EQ(c.layer, 1);
    // Top-2 copies of every token of both expert ranks: 2 x tokens x 2 x hidden, bf16.
    EXPECT_EQ(c.shape, "1024x256");
  }
  EXPECT_EQ(dispatch, 2);  // forward and backward
  EXPECT_TRUE(r.layers[1].moe);
  EXPECT_FALSE(r.layers[0].moe);
}

}  // namespace
}  // namespace chimera
