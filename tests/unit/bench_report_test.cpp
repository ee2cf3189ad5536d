// SPDX-License-Identifier: Apache-2.0
// Tests chimera-bench's table, JSON rows and timed loop.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "collective.hpp"
#include "report.hpp"
#include "timing.hpp"

namespace chimera::bench {
namespace {

ResultRow sampleRow() {
  ResultRow row;
  row.bytes = 32u << 20;
  row.count = (32u << 20) / 4;
  row.dtype = DataType::F32;
  row.op = ReduceOp::Sum;
  row.timeUs = 20000.0;
  row.wrong = 0;
  row.inPlace = InPlaceResult{};
  row.inPlace->timeUs = 25000.0;
  row.inPlace->wrong = 1;
  row.baselineTimeUs = 30000.0;
  row.baselineWrong = 2;
  computeBandwidth(row, busBandwidthFactor(Collective::AllReduce, 8));
  return row;
}

TEST(BenchReport, BandwidthAndSpeedup) {
  const ResultRow row = sampleRow();
  EXPECT_NEAR(row.algbwGBps, 33554432.0 / 0.02 / 1e9, 1e-12);
  EXPECT_NEAR(row.busbwGBps, row.algbwGBps * 1.75, 1e-12);
  ASSERT_TRUE(row.inPlace.has_value());
  EXPECT_NEAR(row.inPlace->algbwGBps, 33554432.0 / 0.025 / 1e9, 1e-12);
  EXPECT_NEAR(row.inPlace->busbwGBps, row.inPlace->algbwGBps * 1.75, 1e-12);
  ASSERT_TRUE(speedup(row).has_value());
  EXPECT_DOUBLE_EQ(*speedup(row), 1.5);
  ResultRow noBaseline = row;
  noBaseline.baselineTimeUs.reset();
  EXPECT_FALSE(speedup(noBaseline).has_value());
}

TEST(BenchReport, TableRowShowsEveryColumn) {
  ResultRow row = sampleRow();
  const std::string line = tableRow(row);
  EXPECT_EQ(
      line,
      "    33554432       8388608     float     sum     20000.0     1.68     2.94       0     25000.0     1.34     "
      "2.35       1      30000.0     1.50\n");
  ResultRow outOfPlaceOnly = row;
  outOfPlaceOnly.inPlace.reset();
  EXPECT_EQ(
      tableRow(outOfPlaceOnly),
      "    33554432       8388608     float     sum     20000.0     1.68     2.94       0         n/a      n/a      "
      "n/a     n/a      30000.0     1.50\n");
  row.wrong.reset();
  row.inPlace->wrong.reset();
  row.baselineTimeUs.reset();
  row.op.reset();
  const std::string unchecked = tableRow(row);
  EXPECT_NE(unchecked.find(" none "), std::string::npos);
  EXPECT_NE(unchecked.find(" N/A     25000.0 "), std::string::npos) << unchecked;
  EXPECT_NE(unchecked.find(" N/A      "), std::string::npos) << unchecked;
  EXPECT_NE(unchecked.find(" n/a "), std::string::npos);
  RunInfo info;
  info.collective = "allreduce";
  info.root = 2;
  const std::string header = tableHeader(info);
  EXPECT_NE(header.find("#wrong"), std::string::npos);
  // The captions stand over their groups, and the columns line up with the rows.
  const std::size_t captions = header.find("out-of-place");
  ASSERT_NE(captions, std::string::npos);
  const std::size_t lineStart = header.rfind('\n', captions) + 1;
  const std::size_t outOfPlaceColumn = captions - lineStart;
  const std::size_t inPlaceColumn = header.find("in-place", captions) - lineStart;
  EXPECT_GT(outOfPlaceColumn, line.find("20000.0") - 10);
  EXPECT_LT(outOfPlaceColumn, line.find(" 0 "));
  EXPECT_GT(inPlaceColumn, line.find("25000.0") - 10);
  EXPECT_LT(inPlaceColumn, line.find(" 1 "));
  const std::size_t columns = header.find("#       size");
  ASSERT_NE(columns, std::string::npos);
  const std::string columnLine = header.substr(columns, header.find('\n', columns) - columns);
  EXPECT_EQ(columnLine.size(), line.size() - 1) << columnLine;
  EXPECT_EQ(columnLine.rfind("#wrong") + 6, line.find(" 1 ") + 2);
  EXPECT_NE(header.find("baseline"), std::string::npos);
  EXPECT_NE(header.find("root (group index) 2"), std::string::npos);
}

TEST(BenchReport, FooterSumsWrongAndAveragesBusBandwidth) {
  ResultRow first = sampleRow();
  first.wrong = 3;
  ResultRow second = sampleRow();
  second.busbwGBps = 1.0;
  second.baselineWrong.reset();
  // Ours = out-of-place 3 + 0 and in-place 1 + 1.
  const std::string footer = tableFooter({first, second});
  EXPECT_NE(footer.find("Wrong elements     : 5 (out-of-place 3, in-place 2; baseline 2)"), std::string::npos)
      << footer;
  // Both rows' out-of-place and in-place groups (sampleRow has both).
  const double average = (first.busbwGBps + first.inPlace->busbwGBps + 1.0 + second.inPlace->busbwGBps) / 4;
  EXPECT_NE(footer.find(fmt::format("{:.3f} GB/s", average)), std::string::npos) << footer;
  ResultRow noInPlaceGroup = second;
  noInPlaceGroup.inPlace.reset();
  EXPECT_NE(tableFooter({noInPlaceGroup}).find("1.000 GB/s"), std::string::npos);  // n/a groups do not count
  ResultRow inPlaceOnlyWrong = sampleRow();
  inPlaceOnlyWrong.baselineWrong = 0;
  EXPECT_NE(tableFooter({inPlaceOnlyWrong}).find(": 1 (out-of-place 0, in-place 1; baseline 0)"), std::string::npos);
  ResultRow noInPlace = sampleRow();
  noInPlace.inPlace.reset();
  EXPECT_NE(tableFooter({noInPlace}).find(": 0 (out-of-place 0, in-place n/a; baseline 2)"), std::string::npos);
  first.wrong.reset();
  first.inPlace->wrong.reset();
  first.baselineWrong.reset();
  EXPECT_NE(tableFooter({first}).find(": N/A (out-of-place N/A, in-place N/A; baseline N/A)"), std::string::npos);
}

TEST(BenchReport, JsonHasTheContractFields) {
  RunInfo info;
  info.collective = "allreduce";
  info.nranks = 8;
  info.backend = "mpi";
  ResultRow unchecked = sampleRow();
  unchecked.wrong.reset();
  unchecked.baselineWrong.reset();
  unchecked.baselineTimeUs.reset();
  unchecked.inPlace->wrong.reset();
  ResultRow noInPlace = sampleRow();
  noInPlace.inPlace.reset();
  const detail::Json json = reportJson(info, {sampleRow(), unchecked, noInPlace});
  EXPECT_EQ(json.at("collective"), "allreduce");
  EXPECT_EQ(json.at("nranks"), 8);
  EXPECT_EQ(json.at("backend"), "mpi");
  EXPECT_EQ(json.at("baseline_wrong"), 4);  // 2 + unchecked + 2
  const detail::Json& rows = json.at("rows");
  ASSERT_EQ(rows.size(), 3u);
  const detail::Json& first = rows[0];
  std::vector<std::string> keys;
  for (auto it = first.begin(); it != first.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"bytes", "count", "dtype", "op", "time_us", "algbw_gbps", "busbw_gbps",
                                            "wrong", "in_place_time_us", "in_place_algbw_gbps", "in_place_busbw_gbps",
                                            "in_place_wrong", "baseline_time_us", "speedup"}));
  EXPECT_EQ(first.at("bytes"), 32 << 20);
  EXPECT_EQ(first.at("dtype"), "float");
  EXPECT_EQ(first.at("op"), "sum");
  EXPECT_DOUBLE_EQ(first.at("speedup").get<double>(), 1.5);
  EXPECT_EQ(first.at("wrong"), 0);
  EXPECT_DOUBLE_EQ(first.at("in_place_time_us").get<double>(), 25000.0);
  EXPECT_DOUBLE_EQ(first.at("in_place_busbw_gbps").get<double>(), sampleRow().inPlace->busbwGBps);
  EXPECT_EQ(first.at("in_place_wrong"), 1);
  const detail::Json& second = rows[1];
  EXPECT_TRUE(second.at("wrong").is_null());
  EXPECT_TRUE(second.at("baseline_time_us").is_null());
  EXPECT_TRUE(second.at("speedup").is_null());
  EXPECT_TRUE(second.at("in_place_wrong").is_null());
  EXPECT_FALSE(second.at("in_place_time_us").is_null());
  const detail::Json& third = rows[2];
  for (const char* key : {"in_place_time_us", "in_place_algbw_gbps", "in_place_busbw_gbps", "in_place_wrong"}) {
    ASSERT_TRUE(third.contains(key)) << key;
    EXPECT_TRUE(third.at(key).is_null()) << key;
  }
  detail::Json reparsed;
  ASSERT_TRUE(detail::parseJson(detail::dumpJson(json, 2), reparsed).isOk());
  EXPECT_EQ(reparsed, json);
}

TEST(Timing, MeanIsLoopTimeOverItersAndMedianIsRobust) {
  TimingSamples samples;
  samples.iterationSeconds = {1.0, 9.0, 2.0, 3.0};
  samples.loopSeconds = 15.0;
  EXPECT_DOUBLE_EQ(meanIterationSeconds(samples), 3.75);
  EXPECT_DOUBLE_EQ(medianIterationSeconds(samples), 2.5);
  samples.iterationSeconds.push_back(100.0);
  EXPECT_DOUBLE_EQ(medianIterationSeconds(samples), 3.0);
  EXPECT_DOUBLE_EQ(medianIterationSeconds(TimingSamples{}), 0.0);
}

TEST(Timing, LoopRunsWarmupBarrierAndItersInOrder) {
  std::vector<char> calls;
  TimingSamples samples;
  const Status status = timeLoop(
      "loop", 2, 3, [&] { return calls.push_back('b'), Status::ok(); },
      [&] { return calls.push_back('o'), Status::ok(); }, samples);
  ASSERT_TRUE(status.isOk());
  EXPECT_EQ(std::string(calls.begin(), calls.end()), "oobooo");
  ASSERT_EQ(samples.iterationSeconds.size(), 3u);
  double sum = 0;
  for (double s : samples.iterationSeconds) sum += s;
  EXPECT_NEAR(sum, samples.loopSeconds, 1e-12);
  int runs = 0;
  const Status failed = timeLoop(
      "failing loop", 0, 5, [] { return Status::ok(); },
      [&] { return ++runs == 2 ? Status::backendError("boom") : Status::ok(); }, samples);
  EXPECT_EQ(failed.code(), StatusCode::BackendError);
  EXPECT_EQ(runs, 2);
}

}  // namespace
}  // namespace chimera::bench
