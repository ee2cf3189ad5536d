// SPDX-License-Identifier: Apache-2.0
// Calibration round trip: timings synthesised from known parameters (with noise) are fitted
// back, starting from a preset with different values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "chimera/planning/calibration.hpp"
#include "chimera/planning/cost_model.hpp"

namespace chimera {
namespace {

// Deterministic noise in [-amplitude, +amplitude] (a 64-bit LCG; no global RNG state).
class Noise {
 public:
  explicit Noise(std::uint64_t seed) : state_(seed) {}
  double next(double amplitude) {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    const double unit = static_cast<double>(state_ >> 11) / static_cast<double>(std::uint64_t{1} << 53);
    return (2 * unit - 1) * amplitude;
  }

 private:
  std::uint64_t state_;
};

// Every primitive (kTransferKinds), on 8 ranks as 1x8, 2x4 and 4x2 concurrent groups, 4 KiB to 64 MiB.
std::vector<CalibrationSample> synthesise(const Topology& truth, double noise, std::uint64_t seed) {
  const CostModel model(truth);
  Noise rng(seed);
  std::vector<CalibrationSample> samples;
  for (const OpKind kind : kTransferKinds) {
    for (const int groupSize : {2, 4, 8}) {
      for (std::uint64_t bytes = 4096; bytes <= (std::uint64_t{64} << 20); bytes *= 8) {
        CalibrationSample sample{kind, groupSize, 8 / groupSize, bytes, 0.0};
        StepCost cost;
        EXPECT_TRUE(model.predictStep(sampleStep(sample), cost).isOk());
        sample.seconds = cost.seconds * (1 + rng.next(noise));
        samples.push_back(sample);
      }
    }
  }
  return samples;
}

Topology preset(const char* name) {
  Topology topology;
  EXPECT_TRUE(loadTopology(name, topology).isOk()) << name;
  return topology;
}

// A host whose MPI library runs AllReduce better and AllGather worse than the model's ring.
Topology hostTruth() {
  Topology truth = preset("host");
  truth.local = {7e-6, 4.5e9};
  truth.reduceSecondsPerByte = 0.8e-9;
  truth.stepSeconds = 30e-6;
  truth.transferFactors.values = {0.8, 1.0, 1.3, 1.0, 1.1, 0.9};
  return truth;
}

double predicted(const Topology& topology, const CommStep& step) {
  StepCost cost;
  EXPECT_TRUE(CostModel(topology).predictStep(step, cost).isOk()) << step.toString();
  return cost.seconds;
}

// |fitted / truth - 1| of one step's predicted time.
double stepError(const Topology& fitted, const Topology& truth, const CommStep& step) {
  return std::fabs(predicted(fitted, step) / predicted(truth, step) - 1);
}

// Steps no sample measured: other sizes, every primitive, and a group of 4 ranks beside 4 idle ones.
std::vector<CommStep> heldOutSteps() {
  std::vector<CommStep> steps;
  for (const OpKind kind : kTransferKinds) {
    for (const std::uint64_t bytes : {std::uint64_t{3} << 20, std::uint64_t{48} << 10}) {
      steps.push_back(sampleStep({kind, 8, 1, bytes, 0.0}));
      steps.push_back(sampleStep({kind, 4, 2, bytes, 0.0}));
    }
  }
  steps.push_back(CommStep::manyToMany({{0, 5, 1 << 22}, {1, 6, 1 << 22}, {2, 7, 1 << 22}}));
  return steps;
}

TEST(Calibration, RecoversAHostWithPerPrimitiveAlgorithmsFromNoisyTimings) {
  const Topology truth = hostTruth();
  const Topology base = preset("host");
  ASSERT_NE(base.local.bytesPerSecond, truth.local.bytesPerSecond);

  Topology fitted;
  FitReport report;
  const std::vector<CalibrationSample> samples = synthesise(truth, 0.02, 42);
  const Status status = fitProfile(base, samples, fitted, &report);
  ASSERT_TRUE(status.isOk()) << status.toString();
  EXPECT_NEAR(fitted.local.alphaSeconds / truth.local.alphaSeconds, 1.0, 0.05);
  EXPECT_NEAR(fitted.stepSeconds / truth.stepSeconds, 1.0, 0.05);
  // Bandwidth and factors are determined up to their product, per primitive.
  for (const OpKind kind : {OpKind::AllGather, OpKind::AllToAll, OpKind::Broadcast, OpKind::ManyToMany}) {
    EXPECT_NEAR(fitted.transferFactors.of(kind) / fitted.local.bytesPerSecond /
                    (truth.transferFactors.of(kind) / truth.local.bytesPerSecond),
                1.0, 0.03)
        << opKindName(kind);
  }
  // On 8 ranks sharing 2 cores the reduction grows with the same bytes as the transfer.
  EXPECT_TRUE(report.reduceAbsorbed);
  EXPECT_FALSE(report.reduceFitted);
  EXPECT_EQ(fitted.reduceSecondsPerByte, 0.0);
  for (const CommStep& step : heldOutSteps()) EXPECT_LT(stepError(fitted, truth, step), 0.04) << step.toString();
  EXPECT_LT(report.rmsRelativeError, 0.02);
  EXPECT_LE(report.maxRelativeError, 0.05);
  EXPECT_EQ(report.outliers, 0);
  EXPECT_EQ(fitted.calibration.samples, static_cast<int>(samples.size()));
  EXPECT_DOUBLE_EQ(fitted.calibration.rmsRelativeError, report.rmsRelativeError);
  EXPECT_EQ(fitted.fabric, Fabric::SharedMemory);
  EXPECT_EQ(fitted.computeSlots, base.computeSlots);
}

TEST(Calibration, AFewGrossOutliersDoNotPullTheFit) {
  const Topology truth = hostTruth();
  std::vector<CalibrationSample> samples = synthesise(truth, 0.02, 11);
  // A loaded machine: three runs took 3x as long, one was 60 % too fast.
  samples[5].seconds *= 3;
  samples[23].seconds *= 3;
  samples[41].seconds *= 3;
  samples[60].seconds *= 0.4;
  Topology fitted;
  FitReport report;
  ASSERT_TRUE(fitProfile(preset("host"), samples, fitted, &report).isOk());
  EXPECT_NEAR(fitted.local.alphaSeconds / truth.local.alphaSeconds, 1.0, 0.05);
  EXPECT_NEAR(fitted.stepSeconds / truth.stepSeconds, 1.0, 0.05);
  for (const CommStep& step : heldOutSteps()) EXPECT_LT(stepError(fitted, truth, step), 0.04) << step.toString();
  EXPECT_EQ(report.outliers, 4);
  EXPECT_GT(report.maxRelativeError, 1.5);  // the report still shows how far off they are
}

TEST(Calibration, ExactTimingsAreFittedExactly) {
  Topology truth = hostTruth();
  truth.local = {3e-6, 9e9};
  truth.reduceSecondsPerByte = 0.25e-9;
  Topology fitted;
  FitReport report;
  ASSERT_TRUE(fitProfile(preset("host"), synthesise(truth, 0.0, 1), fitted, &report).isOk());
  EXPECT_NEAR(fitted.local.alphaSeconds, truth.local.alphaSeconds, 1e-6 * truth.local.alphaSeconds);
  EXPECT_NEAR(fitted.stepSeconds, truth.stepSeconds, 1e-6 * truth.stepSeconds);
  for (const CommStep& step : heldOutSteps()) EXPECT_LT(stepError(fitted, truth, step), 1e-6) << step.toString();
  EXPECT_LT(report.maxRelativeError, 1e-9);
}

TEST(Calibration, ScalesEveryLinkClassOfAPresetAndKeepsTheirRatio) {
  const Topology base = preset("pcie-4080x8");
  Topology truth = base;
  truth.local = {base.local.alphaSeconds * 1.5, base.local.bytesPerSecond * 0.8};
  truth.cross = {base.cross.alphaSeconds * 1.5, base.cross.bytesPerSecond * 0.8};
  Topology fitted;
  FitReport report;
  ASSERT_TRUE(fitProfile(base, synthesise(truth, 0.01, 7), fitted, &report).isOk());
  EXPECT_NEAR(report.alphaScale, 1.5, 0.05);
  EXPECT_NEAR(fitted.stepSeconds / base.stepSeconds, 1.0, 0.05);
  // The GPUs reduce for free: every primitive moves bytes as modelled, at 0.8x the bandwidth.
  for (const OpKind kind : kTransferKinds) {
    EXPECT_NEAR(fitted.transferFactors.of(kind) / report.bandwidthScale, 1.0 / 0.8, 0.03) << opKindName(kind);
  }
  EXPECT_NEAR(fitted.cross.bytesPerSecond / fitted.local.bytesPerSecond,
              base.cross.bytesPerSecond / base.local.bytesPerSecond, 1e-12);
  EXPECT_EQ(fitted.name, "pcie-4080x8");
}

TEST(Calibration, KeepsTheBaseReductionCostWhenNoSampleReduces) {
  Topology host = preset("host");
  host.reduceSecondsPerByte = 0.26e-9;  // a base that prices reductions apart from the transfers
  Topology truth = host;
  truth.local = {5e-6, 6e9};
  std::vector<CalibrationSample> gathers;
  for (const CalibrationSample& s : synthesise(truth, 0.0, 3)) {
    if (s.primitive == OpKind::AllGather || s.primitive == OpKind::AllToAll) gathers.push_back(s);
  }
  const Topology base = host;
  Topology fitted;
  FitReport report;
  ASSERT_TRUE(fitProfile(base, gathers, fitted, &report).isOk());
  EXPECT_FALSE(report.reduceFitted);
  EXPECT_FALSE(report.reduceAbsorbed);
  EXPECT_EQ(fitted.reduceSecondsPerByte, base.reduceSecondsPerByte);
  // Unmeasured primitives keep the base's factor and take the links' bandwidth.
  EXPECT_EQ(fitted.transferFactors.of(OpKind::AllReduce), base.transferFactors.of(OpKind::AllReduce));
  EXPECT_NEAR(fitted.local.bytesPerSecond, truth.local.bytesPerSecond, 1e-6 * truth.local.bytesPerSecond);
}

TEST(Calibration, PointsCoverEveryPrimitiveGroupSizeAndSizeAndFitBack) {
  std::vector<CalibrationSample> points;
  ASSERT_TRUE(calibrationPoints(8, 1 << 20, 16 << 20, points).isOk());
  // 5 collectives and manytomany x group sizes {2, 4, 8} x sizes {1, 4, 16} MiB.
  ASSERT_EQ(points.size(), 6u * 3u * 3u);
  for (const CalibrationSample& p : points) {
    EXPECT_EQ(p.groupSize * p.numGroups, 8);
    EXPECT_EQ(p.bytesPerRank % static_cast<std::uint64_t>(16 * p.groupSize), 0u);
    EXPECT_EQ(p.seconds, 0.0);
  }
  EXPECT_EQ(points.front().bytesPerRank, 1u << 20);
  EXPECT_EQ(points[2].bytesPerRank, 16u << 20);
  EXPECT_EQ(points.back().primitive, OpKind::ManyToMany);
  // Filling the points with a known machine's times and fitting recovers it.
  Topology truth = hostTruth();
  truth.local = {2e-4, 3.5e9};
  for (CalibrationSample& p : points) p.seconds = predicted(truth, sampleStep(p));
  Topology fitted;
  ASSERT_TRUE(fitProfile(preset("host"), points, fitted).isOk());
  for (const CommStep& step : heldOutSteps()) EXPECT_LT(stepError(fitted, truth, step), 1e-6) << step.toString();
  // Rounding to whole blocks, and bad ranges.
  ASSERT_TRUE(calibrationPoints(6, 100, 100, points).isOk());
  ASSERT_EQ(points.size(), 6u);  // only groups of 2 divide 6 among powers of two
  EXPECT_EQ(points[0].bytesPerRank, 96u);
  ASSERT_TRUE(calibrationPoints(2, std::uint64_t{1} << 62, ~std::uint64_t{0}, points).isOk());
  EXPECT_EQ(points.size(), 6u);  // no overflow past the largest size
  EXPECT_FALSE(calibrationPoints(1, 1, 2, points).isOk());
  EXPECT_NE(calibrationPoints(8, 4096, 1024, points).message().find("0 < min <= max"), std::string::npos);
}

TEST(Calibration, AManyToManySampleSendsFromTheFirstHalfOfEachGroupToTheSecond) {
  const CommStep step = sampleStep({OpKind::ManyToMany, 4, 2, 1000, 0.0});
  ASSERT_EQ(step.kind, OpKind::ManyToMany);
  ASSERT_EQ(step.transfers.size(), 4u);
  const std::vector<std::pair<int, int>> expected = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(step.transfers[i].src, expected[i].first);
    EXPECT_EQ(step.transfers[i].dst, expected[i].second);
    EXPECT_EQ(step.transfers[i].bytes, 1000u);
  }
}

TEST(Calibration, BadSamplesAreRejectedWithAReason) {
  const Topology base = preset("host");
  Topology fitted = base;
  fitted.name = "untouched";
  Status status = fitProfile(base, {}, fitted);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_NE(status.message().find("calibration needs samples of several sizes, got none"), std::string::npos)
      << status.message();
  // Latency, step, reduction and the AllReduce's transfer: 4 unknowns.
  status =
      fitProfile(base, {{OpKind::AllReduce, 8, 1, 1 << 20, 1e-2}, {OpKind::AllReduce, 8, 1, 1 << 22, 4e-2}}, fitted);
  EXPECT_NE(status.message().find("at least 4 samples for the 4 terms"), std::string::npos) << status.message();

  status = fitProfile(base, {{OpKind::Send, 2, 1, 1024, 1e-3}}, fitted);
  EXPECT_NE(status.message().find("sample 0: primitive must be a collective or manytomany, got send"),
            std::string::npos)
      << status.message();
  status = fitProfile(base, {{OpKind::ManyToMany, 2, 1, 1024, 1e-3}, {OpKind::ManyToMany, 3, 2, 1024, 1e-3}}, fitted);
  EXPECT_NE(status.message().find("sample 1: a manytomany sample pairs the halves of each group, so its group size "
                                  "must be even, got 3"),
            std::string::npos)
      << status.message();
  status = fitProfile(base, {{OpKind::AllGather, 4, 1, 1024, 1e-3}, {OpKind::AllGather, 4, 3, 1024, 1e-3}}, fitted);
  EXPECT_NE(status.message().find("sample 1: 3 groups of 4 ranks exceed"), std::string::npos) << status.message();
  status = fitProfile(base, {{OpKind::AllGather, 4, 1, 1024, -1.0}}, fitted);
  EXPECT_NE(status.message().find("measured time must be > 0"), std::string::npos) << status.message();
  status = fitProfile(base, {{OpKind::AllGather, 1, 1, 1024, 1e-3}}, fitted);
  EXPECT_NE(status.message().find("group size >= 2"), std::string::npos) << status.message();

  // One size only: latency and bandwidth cannot be told apart.
  std::vector<CalibrationSample> oneSize;
  for (int i = 0; i < 5; ++i) oneSize.push_back({OpKind::AllGather, 8, 1, 1 << 20, 1e-3 * (1 + 0.01 * i)});
  status = fitProfile(base, oneSize, fitted);
  EXPECT_NE(status.message().find("do not determine"), std::string::npos) << status.message();
  EXPECT_EQ(fitted.name, "untouched");
}

}  // namespace
}  // namespace chimera
