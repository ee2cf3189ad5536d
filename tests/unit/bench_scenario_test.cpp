// SPDX-License-Identifier: Apache-2.0
// chimera-bench's chain mode, the pure parts: flags, presets, the tensor shape per size and
// the input values.
#include <gtest/gtest.h>

#include <vector>

#include "buffer_check.hpp"
#include "element_codec.hpp"
#include "options.hpp"
#include "scenario.hpp"
#include "scenario_report.hpp"

namespace chimera::bench {
namespace {

Scenario resolved(const std::string& name, const std::string& mesh = "") {
  ScenarioText text;
  EXPECT_TRUE(findScenario(name, text).isOk()) << name;
  Scenario scenario;
  const Status status = resolveScenario(text, 8, mesh, scenario);
  EXPECT_TRUE(status.isOk()) << status.toString();
  return scenario;
}

TEST(BenchScenario, SixPresetsInTheIssuesOrder) {
  std::vector<std::string> names;
  for (const ScenarioText& preset : scenarioPresets()) names.push_back(preset.name);
  EXPECT_EQ(names, (std::vector<std::string>{"tp_sp", "tp_pp", "tp_ep", "sp_ep", "pp_sp", "pp_ep"}));
  ScenarioText text;
  const Status unknown = findScenario("tp_xx", text);
  EXPECT_EQ(unknown.code(), StatusCode::InvalidArgument);
  EXPECT_NE(unknown.message().find("tp_sp"), std::string::npos) << unknown.message();
}

TEST(BenchScenario, EveryPresetGetsAnEvenlySplitTensorOfAtMostTheSize) {
  for (const ScenarioText& preset : scenarioPresets()) {
    const Scenario scenario = resolved(preset.name);
    for (std::size_t bytes : {std::size_t{16} << 20, std::size_t{1} << 20, std::size_t{4096}}) {
      TensorSpec spec;
      ASSERT_TRUE(scenarioTensor(scenario, DataType::F32, bytes, spec).isOk()) << preset.name << " " << bytes;
      ASSERT_TRUE(scenario.from.validate(spec).isOk()) << preset.name;
      ChainTrace trace;
      ASSERT_TRUE(traceChain(scenario.from, scenario.chain, spec, trace).isOk()) << preset.name << spec.toString();
      ASSERT_TRUE(scenario.consume->validate(spec).isOk()) << preset.name << spec.toString();
      const auto local = static_cast<std::size_t>(scenario.from.localBytes(spec));
      EXPECT_LE(local, bytes) << preset.name;
      EXPECT_GE(local * 2, bytes) << preset.name << " " << spec.toString();
    }
  }
}

TEST(BenchScenario, SixteenMiBIsExactForEveryPreset) {
  for (const ScenarioText& preset : scenarioPresets()) {
    TensorSpec spec;
    ASSERT_TRUE(scenarioTensor(resolved(preset.name), DataType::BF16, 16u << 20, spec).isOk());
    EXPECT_EQ(resolved(preset.name).from.localBytes(spec), 16 << 20) << preset.name << " " << spec.toString();
  }
}

TEST(BenchScenario, SizeTooSmallIsAClearError) {
  TensorSpec spec;
  const Status status = scenarioTensor(resolved("sp_ep"), DataType::F64, 8, spec);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("too small"), std::string::npos) << status.message();
}

TEST(BenchScenario, AnotherMeshMustNameTheSameAxes) {
  const Scenario other = resolved("tp_pp", "tp=2,pp=4");
  EXPECT_EQ(other.mesh.toString(), "tp=2,pp=4");
  ScenarioText text;
  ASSERT_TRUE(findScenario("tp_pp", text).isOk());
  Scenario scenario;
  const Status status = resolveScenario(text, 8, "dp=2,tp=4", scenario);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("tp_pp --mesh"), std::string::npos) << status.message();
}

TEST(BenchScenario, ChainMismatchNamesTheScenario) {
  Scenario scenario;
  const Status status = resolveScenario({"chain", "", "tp=P", "allgather:tp:0", ""}, 8, "tp=8", scenario);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(status.message().rfind("chain chain: ", 0), 0u) << status.message();
}

TEST(BenchScenario, ReplicasHoldEqualInputsAndPartialCopiesDiffer) {
  // tp_pp starts as pp=@0,tp=P: ranks 0-3 hold partial copies, 4-7 hold nothing.
  const Scenario tpPp = resolved("tp_pp");
  TensorSpec spec{{8, 16}, DataType::F32};
  std::vector<float> rank0(128);
  std::vector<float> rank1(128);
  fillScenarioInput(tpPp.from, spec, 0, 1, rank0.data());
  fillScenarioInput(tpPp.from, spec, 1, 1, rank1.data());
  EXPECT_NE(rank0, rank1);
  std::vector<float> untouched(128, -1.0f);
  fillScenarioInput(tpPp.from, spec, 4, 1, untouched.data());
  EXPECT_EQ(untouched, std::vector<float>(128, -1.0f));
  // On dp=2,tp=4 with tp=P, dp is replicated: ranks 1 and 5 (same tp index) hold equal data.
  Scenario tpSp;
  ASSERT_TRUE(resolveScenario({"x", "", "tp=P", "allreduce:tp", ""}, 8, "dp=2,tp=4", tpSp).isOk());
  std::vector<float> a(128);
  std::vector<float> b(128);
  fillScenarioInput(tpSp.from, spec, 1, 7, a.data());
  fillScenarioInput(tpSp.from, spec, 5, 7, b.data());
  EXPECT_EQ(a, b);
}

TEST(BenchScenario, ShardedInputFollowsTheLogicalIndex) {
  // dp=S0,sp=S1 of 4x8: rank (dp 1, sp 2) holds rows 2-3, columns 4-5; with one partial
  // member its values equal rank 0's values at the same logical index of a replicated layout.
  const Scenario spEp = resolved("sp_ep");
  Layout whole = Layout::replicated(spEp.mesh);
  TensorSpec spec{{4, 8, 1}, DataType::F32};
  std::vector<float> full(32);
  fillScenarioInput(whole, spec, 0, 3, full.data());
  std::vector<float> shard(4);
  fillScenarioInput(spEp.from, spec, 6, 3, shard.data());
  EXPECT_EQ(shard, (std::vector<float>{full[2 * 8 + 4], full[2 * 8 + 5], full[3 * 8 + 4], full[3 * 8 + 5]}));
}

TEST(BenchScenario, ModeFlags) {
  Options options;
  EXPECT_TRUE(parseOptions({"--scenario", "all", "--topology", "pcie-4080x8", "--backend", "mpi"}, options).isOk());
  EXPECT_TRUE(options.chainMode());
  EXPECT_FALSE(options.statGiven);
  EXPECT_TRUE(parseOptions({"--chain", "allreduce:tp", "--from", "tp=P", "--mesh", "tp=8"}, options).isOk());
  EXPECT_TRUE(parseOptions({"--calibrate", "--out", "p.json"}, options).isOk());
  EXPECT_TRUE(parseOptions({"--scenario", "tp_pp", "--chunks", "4"}, options).isOk());
  EXPECT_EQ(options.chunks, 4);
  EXPECT_TRUE(parseOptions({"--scenario", "tp_pp", "--chunks", "auto"}, options).isOk());
  EXPECT_EQ(options.chunks, 0);
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--scenario", "xx"},
                                             {"--scenario", "all", "--chain", "allreduce:tp", "--from", "tp=P"},
                                             {"--chain", "allreduce:tp"},
                                             {"--consume", "tp=S0"},
                                             {"--scenario", "all", "--axis", "tp"},
                                             {"--calibrate"},
                                             {"--out", "p.json"},
                                             {"--backend", "gloo"},
                                             {"-C", "allreduce", "--backend", "nccl"},
                                             {"--topology", "host"},
                                             {"--scenario", "all", "--chunks", "0"},
                                             {"-C", "allreduce", "--chunks", "2"}}) {
    const Status status = parseOptions(bad, options);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << bad[0] << " " << bad[1];
  }
}

TEST(BenchScenario, DifferencesCountEveryDifferingElementAndEveryNaN) {
  const std::vector<float> reference{1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> result = reference;
  EXPECT_EQ(countDifferences(result.data(), reference.data(), 4, DataType::F32), 0u);
  result[1] = 2.5f;
  result[3] = -4.0f;
  EXPECT_EQ(countDifferences(result.data(), reference.data(), 4, DataType::F32), 2u);
  // Both programs leaving an element unwritten (0xFF poison: NaN) still counts.
  std::vector<float> poisoned(4);
  poisonBuffer(poisoned.data(), sizeof(float) * 4);
  EXPECT_EQ(countDifferences(poisoned.data(), poisoned.data(), 4, DataType::F32), 4u);
  const std::vector<std::uint16_t> halfRef{0x3c00, 0x4000};  // 1.0, 2.0 in f16
  const std::vector<std::uint16_t> halfOut{0x3c00, 0x4200};  // 1.0, 3.0
  EXPECT_EQ(countDifferences(halfOut.data(), halfRef.data(), 2, DataType::F16), 1u);
}

TEST(BenchScenario, RowsKeepTheCollectiveFieldsAndAddTheirOwn) {
  ScenarioRow row;
  row.scenario = "tp_sp";
  row.shape = "1024x4096";
  row.plannerFuses = true;
  row.predictedSpeedup = 2.0;
  row.result.bytes = 16 << 20;
  row.result.count = 4 << 20;
  row.result.op = ReduceOp::Sum;
  row.result.timeUs = 100.0;
  row.result.baselineTimeUs = 170.0;
  row.result.wrong = 0;
  row.pipelinedTimeUs = 80.0;
  row.pipelineChunks = 4;
  row.predictedPipelineGain = 1.5;
  ScenarioRow unchecked = row;
  unchecked.result.wrong.reset();
  unchecked.predictedSpeedup.reset();
  const std::string text = detail::dumpJson(scenarioJson({8, "mpi", "host", "median", 20, 5}, {row, unchecked}));
  for (const char* field :
       {"\"bytes\":16777216", "\"count\":4194304", "\"op\":\"sum\"", "\"time_us\":100", "\"baseline_time_us\":170",
        "\"speedup\":1.7", "\"wrong\":0", "\"scenario\":\"tp_sp\"", "\"predicted_speedup\":2", "\"planner_fuses\":true",
        "\"wrong\":null", "\"predicted_speedup\":null", "\"mode\":\"scenario\"", "\"stat\":\"median\"",
        "\"pipelined_time_us\":80", "\"pipeline_chunks\":4", "\"predicted_pipeline_gain\":1.5"}) {
    EXPECT_NE(text.find(field), std::string::npos) << field << " in " << text;
  }
  const std::string line = scenarioTableRow(row);
  EXPECT_NE(line.find("1.70"), std::string::npos) << line;
  EXPECT_NE(line.find("2.00"), std::string::npos) << line;
  EXPECT_NE(line.find("fused"), std::string::npos) << line;
  EXPECT_NE(line.find("1.25"), std::string::npos) << line;  // fused / pipelined = 100 / 80
  EXPECT_NE(line.find("1.50"), std::string::npos) << line;
  EXPECT_NE(scenarioTableRow(unchecked).find("N/A"), std::string::npos);
}

}  // namespace
}  // namespace chimera::bench
