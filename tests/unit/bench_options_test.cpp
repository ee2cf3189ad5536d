// SPDX-License-Identifier: Apache-2.0
// Tests chimera-bench's command line: accepted flags, and errors for bad ones.
#include <gtest/gtest.h>

#include "collective.hpp"
#include "core/type_lists.hpp"
#include "options.hpp"

namespace chimera::bench {
namespace {

Status parse(std::vector<std::string> args, Options& out) { return parseOptions(args, out); }

TEST(BenchOptions, DefaultsFollowNcclTests) {
  Options options;
  ASSERT_TRUE(parse({}, options).isOk());
  EXPECT_EQ(options.minBytes, 32u << 20);
  EXPECT_EQ(options.maxBytes, 32u << 20);
  EXPECT_EQ(options.iters, 20);
  EXPECT_TRUE(options.check);
  EXPECT_EQ(options.collective, Collective::AllReduce);
  EXPECT_EQ(options.dataTypes, std::vector<DataType>{DataType::F32});
  EXPECT_EQ(options.ops, std::vector<ReduceOp>{ReduceOp::Sum});
  EXPECT_EQ(options.stat, TimeStatistic::Mean);
}

TEST(BenchOptions, ShortLongAndInlineForms) {
  Options options;
  ASSERT_TRUE(
      parse(
          {"-b", "1K", "--maxbytes=64K", "-f",     "4",         "-n",        "7",      "--warmup_iters", "0",      "-c",
           "0",  "-C", "reducescatter",  "--mesh", "pp=2,tp=4", "--axis=tp", "--json", "out.json",       "--seed", "42",
           "-r", "3",  "--stat",         "median"},
          options)
          .isOk());
  EXPECT_EQ(options.minBytes, 1024u);
  EXPECT_EQ(options.maxBytes, 64u << 10);
  EXPECT_EQ(options.stepFactor, 4u);
  EXPECT_EQ(options.iters, 7);
  EXPECT_EQ(options.warmupIters, 0);
  EXPECT_FALSE(options.check);
  EXPECT_EQ(options.collective, Collective::ReduceScatter);
  EXPECT_EQ(options.mesh, "pp=2,tp=4");
  EXPECT_EQ(options.axis, "tp");
  EXPECT_EQ(options.jsonPath, "out.json");
  EXPECT_EQ(options.seed, 42u);
  EXPECT_EQ(options.root, 3);
  EXPECT_EQ(options.stat, TimeStatistic::Median);
}

TEST(BenchOptions, TypeAndOpListsAndAll) {
  Options options;
  ASSERT_TRUE(parse({"-d", "half,bf16,int32", "-o", "all"}, options).isOk());
  EXPECT_EQ(options.dataTypes, (std::vector<DataType>{DataType::F16, DataType::BF16, DataType::I32}));
  EXPECT_EQ(options.ops.size(), std::size(kAllReduceOps));
  ASSERT_TRUE(parse({"-d", "all"}, options).isOk());
  EXPECT_EQ(options.dataTypes.size(), std::size(kAllDataTypes));
}

TEST(BenchOptions, BadInputNamesTheProblem) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-C", "foo"}, "foo"},
      {{"-b", "12X"}, "12X"},
      {{"-b", "0"}, "-b/--minbytes"},
      {{"-b", "64M", "-e", "1M"}, "larger than"},
      {{"-b", "1M", "-e", "64M", "-f", "1"}, "stepfactor"},
      {{"-n", "0"}, "-n/--iters"},
      {{"-n", "x"}, "malformed number 'x'"},
      {{"-w", "-1"}, "-w/--warmup_iters"},
      {{"-c", "2"}, "expected 0 or 1"},
      {{"-d", "f128"}, "f128"},
      {{"-o", "sum,xor"}, "xor"},
      {{"-o", ""}, "-o/--op"},
      {{"--stat", "p99"}, "p99"},
      {{"--frobnicate"}, "unknown option '--frobnicate'"},
      {{"-b"}, "-b needs a value"},
      {{"--scenario", "tp_pp", "--only", "pipelined"}, "--only: expected baseline or fused, got 'pipelined'"},
      {{"--only", "fused"}, "--only applies to --scenario and --chain"},
      {{"--help=1"}, "takes no value"},
  };
  for (const auto& [args, needle] : cases) {
    Options options;
    const Status status = parse(args, options);
    EXPECT_EQ(status.code(), StatusCode::InvalidArgument) << args.front();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  }
}

TEST(BenchOptions, OnlyPicksOneProgramOfAChain) {
  Options options;
  EXPECT_TRUE(options.only.empty());
  ASSERT_TRUE(parse({"--scenario", "tp_pp", "--only", "baseline"}, options).isOk());
  EXPECT_EQ(options.only, "baseline");
  ASSERT_TRUE(parse({"--scenario", "all", "--only=fused"}, options).isOk());
  EXPECT_EQ(options.only, "fused");
}

TEST(BenchOptions, HelpSkipsConsistencyChecks) {
  Options options;
  ASSERT_TRUE(parse({"-b", "64M", "-e", "1M", "-h"}, options).isOk());
  EXPECT_TRUE(options.help);
  EXPECT_NE(usageText().find("--collective"), std::string::npos);
}

TEST(BenchOptions, SizeSeriesMultipliesUpToMax) {
  Options options;
  ASSERT_TRUE(parse({"-b", "1K", "-e", "10K", "-f", "2"}, options).isOk());
  EXPECT_EQ(sizeSeries(options), (std::vector<std::size_t>{1024, 2048, 4096, 8192}));
  ASSERT_TRUE(parse({"-b", "32M", "-e", "32M"}, options).isOk());
  EXPECT_EQ(sizeSeries(options), std::vector<std::size_t>{32u << 20});
  options.minBytes = std::size_t{1} << 62;
  options.maxBytes = ~std::size_t{0};
  options.stepFactor = 4;
  EXPECT_EQ(sizeSeries(options), std::vector<std::size_t>{std::size_t{1} << 62});
}

TEST(Collective, NamesRoundTripAndBusFactors) {
  for (Collective collective : kAllCollectives) {
    Collective parsed = Collective::Send;
    ASSERT_TRUE(parseCollective(collectiveName(collective), parsed).isOk());
    EXPECT_EQ(parsed, collective);
  }
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::AllReduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::ReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::AllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::Broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busBandwidthFactor(Collective::Send, 8), 1.0);
  EXPECT_TRUE(collectiveReduces(Collective::ReduceScatter));
  EXPECT_FALSE(collectiveReduces(Collective::AllGather));
}

TEST(Collective, BufferShapesFollowNcclTests) {
  // 32 MiB of floats on 8 ranks.
  const std::size_t bytes = 32u << 20;
  const std::size_t count = bytes / 4;
  BufferShape s = bufferShape(Collective::AllReduce, bytes, 4, 8);
  EXPECT_EQ(s.sendCount, count);
  EXPECT_EQ(s.recvCount, count);
  EXPECT_EQ(s.paramCount, count);
  EXPECT_EQ(s.bytes, bytes);
  s = bufferShape(Collective::ReduceScatter, bytes, 4, 8);
  EXPECT_EQ(s.sendCount, count);
  EXPECT_EQ(s.recvCount, count / 8);
  EXPECT_EQ(s.paramCount, count / 8);
  EXPECT_EQ(s.bytes, bytes);
  s = bufferShape(Collective::AllGather, bytes, 4, 8);
  EXPECT_EQ(s.sendCount, count / 8);
  EXPECT_EQ(s.recvCount, count);
  EXPECT_EQ(s.paramCount, count / 8);
  EXPECT_EQ(s.bytes, bytes);
  s = bufferShape(Collective::AllToAll, bytes, 4, 8);
  EXPECT_EQ(s.sendCount, count);
  EXPECT_EQ(s.paramCount, count / 8);
  // Odd sizes round the per-rank block down and print the rounded size.
  s = bufferShape(Collective::AllGather, 100, 4, 3);  // 25 floats -> blocks of 8
  EXPECT_EQ(s.sendCount, 8u);
  EXPECT_EQ(s.recvCount, 24u);
  EXPECT_EQ(s.bytes, 96u);
  s = bufferShape(Collective::Send, 7, 2, 4);
  EXPECT_EQ(s.paramCount, 3u);
  EXPECT_EQ(s.bytes, 6u);
  s = bufferShape(Collective::ReduceScatter, 4, 4, 8);  // fewer elements than ranks
  EXPECT_EQ(s.sendCount, 0u);
  EXPECT_EQ(s.bytes, 0u);
}

}  // namespace
}  // namespace chimera::bench
