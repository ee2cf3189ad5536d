// SPDX-License-Identifier: Apache-2.0
// Calibration: weights of the model's latency, transfer and reduction terms fitted to
// measurements by non-negative least squares on relative error.
#include "chimera/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "common/check.hpp"
#include "cost/step_terms.hpp"

namespace chimera {

namespace {

constexpr int kTerms = 3;  // latency, transfer, reduction
constexpr int kLatency = 0;
constexpr int kTransfer = 1;
constexpr int kReduce = 2;
constexpr std::array<const char*, kTerms> kTermNames = {"latency", "bandwidth", "reduction"};

using Row = std::array<double, kTerms>;
using Coefficients = std::array<double, kTerms>;

struct Design {
  std::vector<Row> rows;  // terms of each sample divided by its measured time
  std::array<bool, kTerms> present{};  // whether any sample has the term at all
};

Status checkSample(const CalibrationSample& s, std::size_t index, int ranks) {
  CHIMERA_CHECK_ARG(s.primitive != StepKind::ManyToMany, "sample {}: primitive must be a collective, got {}", index,
                    stepKindName(s.primitive));
  CHIMERA_CHECK_ARG(s.groupSize >= 2 && s.numGroups >= 1, "sample {}: needs group size >= 2 and >= 1 group, got {} x {}",
                    index, s.numGroups, s.groupSize);
  CHIMERA_CHECK_ARG(static_cast<long long>(s.groupSize) * s.numGroups <= ranks,
                    "sample {}: {} groups of {} ranks exceed the topology's {} ranks", index, s.numGroups,
                    s.groupSize, ranks);
  CHIMERA_CHECK_ARG(s.bytesPerRank > 0, "sample {}: bytes per rank must be > 0", index);
  CHIMERA_CHECK_ARG(std::isfinite(s.seconds) && s.seconds > 0, "sample {}: measured time must be > 0 s, got {}",
                    index, s.seconds);
  return Status::ok();
}

Status buildDesign(const Topology& base, const std::vector<CalibrationSample>& samples, Design& out) {
  Design design;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    CHIMERA_RETURN_IF_ERROR(checkSample(samples[i], i, base.ranks));
    detail::StepTerms terms;
    CHIMERA_RETURN_IF_ERROR(detail::stepTerms(base, sampleStep(samples[i]), terms));
    const Row row = {terms.latencySeconds, terms.transferSeconds, terms.reducedBytes};
    Row weighted{};
    for (int j = 0; j < kTerms; ++j) {
      weighted[j] = row[j] / samples[i].seconds;
      design.present[j] = design.present[j] || row[j] > 0;
    }
    design.rows.push_back(weighted);
  }
  out = std::move(design);
  return Status::ok();
}

// Least squares of sum_i (row_i . c - 1)^2 over the columns in `mask` (others 0), by the
// normal equations on norm-scaled columns. False when the columns are (nearly) dependent.
bool solveSubset(const std::vector<Row>& rows, unsigned mask, Coefficients& out) {
  std::array<int, kTerms> cols{};
  int k = 0;
  for (int j = 0; j < kTerms; ++j) {
    if (mask & (1u << j)) cols[k++] = j;
  }
  std::array<double, kTerms> scale{};
  for (int a = 0; a < k; ++a) {
    for (const Row& r : rows) scale[a] += r[cols[a]] * r[cols[a]];
    scale[a] = std::sqrt(scale[a]);
    if (scale[a] == 0) return false;
  }
  std::array<std::array<double, kTerms + 1>, kTerms> m{};  // augmented normal matrix
  for (const Row& r : rows) {
    for (int a = 0; a < k; ++a) {
      const double xa = r[cols[a]] / scale[a];
      for (int b = 0; b < k; ++b) m[a][b] += xa * r[cols[b]] / scale[b];
      m[a][k] += xa;
    }
  }
  for (int p = 0; p < k; ++p) {  // Gaussian elimination with partial pivoting
    int pivot = p;
    for (int q = p + 1; q < k; ++q) {
      if (std::fabs(m[q][p]) > std::fabs(m[pivot][p])) pivot = q;
    }
    if (std::fabs(m[pivot][p]) < 1e-9) return false;
    std::swap(m[p], m[pivot]);
    for (int q = 0; q < k; ++q) {
      if (q == p) continue;
      const double f = m[q][p] / m[p][p];
      for (int c = p; c <= k; ++c) m[q][c] -= f * m[p][c];
    }
  }
  out = {};
  for (int a = 0; a < k; ++a) out[cols[a]] = m[a][k] / m[a][a] / scale[a];
  return true;
}

double residual(const std::vector<Row>& rows, const Coefficients& c) {
  double sum = 0;
  for (const Row& r : rows) {
    const double e = r[0] * c[0] + r[1] * c[1] + r[2] * c[2] - 1.0;
    sum += e * e;
  }
  return sum;
}

// Non-negative least squares over at most three columns: the best non-negative solution
// among all column subsets that keep the bandwidth term.
Status solveNonNegative(const Design& design, Coefficients& out) {
  unsigned full = 0;
  for (int j = 0; j < kTerms; ++j) {
    if (design.present[j]) full |= 1u << j;
  }
  Coefficients unconstrained{};
  if (!solveSubset(design.rows, full, unconstrained)) {
    std::string terms;
    for (int j = 0; j < kTerms; ++j) {
      if (design.present[j]) terms += std::string(terms.empty() ? "" : ", ") + kTermNames[j];
    }
    return Status::invalidArgument(fmt::format(
        "calibration samples do not determine the {} terms separately: measure several message sizes "
        "(and, for the reduction cost, both reducing and non-reducing collectives)",
        terms));
  }
  double best = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask <= full; ++mask) {
    if ((mask & ~full) != 0 || (mask & (1u << kTransfer)) == 0) continue;
    Coefficients c{};
    if (!solveSubset(design.rows, mask, c)) continue;
    if (c[0] < 0 || c[1] <= 0 || c[2] < 0) continue;
    const double r = residual(design.rows, c);
    if (r < best) {
      best = r;
      out = c;
    }
  }
  CHIMERA_CHECK_ARG(std::isfinite(best), "calibration found no positive bandwidth that fits the samples");
  return Status::ok();
}

}  // namespace

CommStep sampleStep(const CalibrationSample& sample) {
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(sample.numGroups));
  for (int g = 0; g < sample.numGroups; ++g) {
    for (int i = 0; i < sample.groupSize; ++i) groups[static_cast<std::size_t>(g)].push_back(g * sample.groupSize + i);
  }
  return CommStep::collective(sample.primitive, std::move(groups), sample.bytesPerRank);
}

Status calibrationPoints(int worldSize, std::uint64_t minBytes, std::uint64_t maxBytes,
                         std::vector<CalibrationSample>& out) {
  CHIMERA_CHECK_ARG(worldSize >= 2, "calibration needs at least 2 ranks, got {}", worldSize);
  CHIMERA_CHECK_ARG(minBytes > 0 && minBytes <= maxBytes, "calibration sizes need 0 < min <= max, got {} and {}",
                    minBytes, maxBytes);
  std::vector<CalibrationSample> points;
  for (const StepKind kind : {StepKind::AllReduce, StepKind::ReduceScatter, StepKind::AllGather, StepKind::AllToAll,
                              StepKind::Broadcast}) {
    for (int groupSize = 2; groupSize <= worldSize; groupSize *= 2) {
      if (worldSize % groupSize != 0) continue;
      const auto unit = static_cast<std::uint64_t>(16 * groupSize);
      for (std::uint64_t bytes = minBytes;; bytes *= 4) {
        points.push_back({kind, groupSize, worldSize / groupSize, std::max(unit, bytes / unit * unit), 0.0});
        if (bytes > maxBytes / 4) break;  // the next size would pass maxBytes (or overflow)
      }
    }
  }
  out = std::move(points);
  return Status::ok();
}

Status fitProfile(const Topology& base, const std::vector<CalibrationSample>& samples, Topology& out,
                  FitReport* report) {
  CHIMERA_RETURN_IF_ERROR(validateTopology(base));
  CHIMERA_CHECK_ARG(!samples.empty(), "calibration needs at least {} samples of several sizes, got none", kTerms);
  Design design;
  CHIMERA_RETURN_IF_ERROR(buildDesign(base, samples, design));
  int unknowns = 0;
  for (const bool present : design.present) unknowns += present ? 1 : 0;
  CHIMERA_CHECK_ARG(samples.size() >= static_cast<std::size_t>(unknowns),
                    "calibration needs at least {} samples for the {} terms they involve, got {}", unknowns, unknowns,
                    samples.size());
  Coefficients c{};
  CHIMERA_RETURN_IF_ERROR(solveNonNegative(design, c));

  Topology fitted = base;
  const double alphaScale = design.present[kLatency] ? c[kLatency] : 1.0;
  fitted.local.alphaSeconds *= alphaScale;
  fitted.cross.alphaSeconds *= alphaScale;
  fitted.local.bytesPerSecond /= c[kTransfer];
  fitted.cross.bytesPerSecond /= c[kTransfer];
  if (design.present[kReduce]) fitted.reduceSecondsPerByte = c[kReduce];

  FitReport fit;
  fit.alphaScale = alphaScale;
  fit.bandwidthScale = 1.0 / c[kTransfer];
  fit.reduceSecondsPerByte = fitted.reduceSecondsPerByte;
  fit.reduceFitted = design.present[kReduce];
  for (const Row& r : design.rows) {
    // Each weighted row predicts time / measured; its error is the relative error.
    const double e = std::fabs(r[0] * c[0] + r[1] * c[1] + r[2] * c[2] - 1.0);
    fit.maxRelativeError = std::max(fit.maxRelativeError, e);
  }
  fit.rmsRelativeError = std::sqrt(residual(design.rows, c) / static_cast<double>(design.rows.size()));
  fitted.calibration = {static_cast<int>(samples.size()), fit.rmsRelativeError};
  CHIMERA_RETURN_IF_ERROR(validateTopology(fitted));
  out = std::move(fitted);
  if (report != nullptr) *report = fit;
  return Status::ok();
}

}  // namespace chimera
