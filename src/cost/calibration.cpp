// SPDX-License-Identifier: Apache-2.0
// Calibration: weights of the model's latency, transfer and reduction terms fitted to
// measurements by non-negative least squares on relative error.
#include "chimera/planning/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/check.hpp"
#include "cost/step_terms.hpp"

namespace chimera {

namespace {

// Columns of the fit: the latency, the reduction, the fixed cost per step, and one transfer
// column per primitive.
constexpr int kLatency = 0;
constexpr int kReduce = 1;
constexpr int kStep = 2;
constexpr int kFirstTransfer = 3;
constexpr unsigned kOptional = (1u << kLatency) | (1u << kReduce) | (1u << kStep);
constexpr int kTerms = kFirstTransfer + static_cast<int>(kTransferKinds.size());

using Row = std::array<double, kTerms>;
using Coefficients = std::array<double, kTerms>;

int transferColumn(OpKind kind) {
  const int index = transferKindIndex(kind);
  CHIMERA_ASSERT(index >= 0);  // checkSample admits only these kinds
  return kFirstTransfer + index;
}

std::string termName(int column) {
  if (column == kLatency) return "latency";
  if (column == kReduce) return "reduction";
  if (column == kStep) return "step";
  return fmt::format("{} bandwidth", opKindName(kTransferKinds[static_cast<std::size_t>(column - kFirstTransfer)]));
}

struct Design {
  std::vector<Row> rows;               // terms of each sample divided by its measured time
  std::vector<double> targets;         // the part of each measured time the terms fit, over that time
  std::vector<double> weights;         // robust (Huber) weight of each sample, in (0, 1]
  std::array<bool, kTerms> present{};  // whether any sample has the term at all
};

// predicted / measured - 1 for sample i.
double relativeError(const Design& design, std::size_t i, const Coefficients& c) {
  double predicted = 0;
  for (int j = 0; j < kTerms; ++j) predicted += design.rows[i][j] * c[j];
  return predicted - design.targets[i];
}

Status checkSample(const CalibrationSample& s, std::size_t index, int ranks) {
  CHIMERA_CHECK_ARG(transferKindIndex(s.primitive) >= 0,
                    "sample {}: primitive must be a collective or manytomany, got {}", index, opKindName(s.primitive));
  CHIMERA_CHECK_ARG(s.primitive != OpKind::ManyToMany || s.groupSize % 2 == 0,
                    "sample {}: a manytomany sample pairs the halves of each group, so its group size must be even, "
                    "got {}",
                    index, s.groupSize);
  CHIMERA_CHECK_ARG(s.groupSize >= 2 && s.numGroups >= 1,
                    "sample {}: needs group size >= 2 and >= 1 group, got {} x {}", index, s.numGroups, s.groupSize);
  CHIMERA_CHECK_ARG(static_cast<long long>(s.groupSize) * s.numGroups <= ranks,
                    "sample {}: {} groups of {} ranks exceed the topology's {} ranks", index, s.numGroups, s.groupSize,
                    ranks);
  CHIMERA_CHECK_ARG(s.bytesPerRank > 0, "sample {}: bytes per rank must be > 0", index);
  CHIMERA_CHECK_ARG(std::isfinite(s.seconds) && s.seconds > 0, "sample {}: measured time must be > 0 s, got {}", index,
                    s.seconds);
  return Status::ok();
}

// With `fitStep` the step cost is a column of the fit; without it the base's step cost is one of
// the fixed costs taken off each measurement.
Status buildDesign(const Topology& base, const std::vector<CalibrationSample>& samples, bool fitStep, Design& out) {
  Design design;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    CHIMERA_RETURN_IF_ERROR(checkSample(samples[i], i, base.ranks));
    detail::StepTerms terms;
    CHIMERA_RETURN_IF_ERROR(detail::stepTerms(base, sampleStep(samples[i]), terms));
    Row row{};
    row[kLatency] = terms.latencySeconds;
    row[kReduce] = terms.reducedBytes;
    row[kStep] = fitStep ? terms.steps : 0;
    row[transferColumn(samples[i].primitive)] = terms.transferSeconds;
    // The other fixed costs (per peer, per local pass) are the base's. The error is relative to
    // the whole measured time, so a sample whose time is mostly fixed cost does not weigh more.
    const double fixed = terms.overheadSeconds - (fitStep ? terms.steps * base.stepSeconds : 0) + terms.localSeconds;
    const double seconds = samples[i].seconds;
    Row weighted{};
    for (int j = 0; j < kTerms; ++j) {
      weighted[j] = row[j] / seconds;
      design.present[j] = design.present[j] || row[j] > 0;
    }
    design.rows.push_back(weighted);
    design.targets.push_back((seconds - fixed) / seconds);
    design.weights.push_back(1.0);
  }
  out = std::move(design);
  return Status::ok();
}

// Weighted least squares of sum_i w_i (row_i . c - 1)^2 over the columns in `mask` (others
// 0), by the normal equations on norm-scaled columns. False when the columns are (nearly)
// dependent.
bool solveSubset(const Design& design, unsigned mask, Coefficients& out) {
  const std::vector<Row>& rows = design.rows;
  std::array<int, kTerms> cols{};
  int k = 0;
  for (int j = 0; j < kTerms; ++j) {
    if (mask & (1u << j)) cols[k++] = j;
  }
  std::array<double, kTerms> scale{};
  for (int a = 0; a < k; ++a) {
    for (std::size_t i = 0; i < rows.size(); ++i) scale[a] += design.weights[i] * rows[i][cols[a]] * rows[i][cols[a]];
    scale[a] = std::sqrt(scale[a]);
    if (scale[a] == 0) return false;
  }
  std::array<std::array<double, kTerms + 1>, kTerms> m{};  // augmented normal matrix
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    for (int a = 0; a < k; ++a) {
      const double xa = design.weights[i] * r[cols[a]] / scale[a];
      for (int b = 0; b < k; ++b) m[a][b] += xa * r[cols[b]] / scale[b];
      m[a][k] += xa * design.targets[i];
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

double weightedResidual(const Design& design, const Coefficients& c) {
  double sum = 0;
  for (std::size_t i = 0; i < design.rows.size(); ++i) {
    const double e = relativeError(design, i, c);
    sum += design.weights[i] * e * e;
  }
  return sum;
}

unsigned presentMask(const Design& design) {
  unsigned mask = 0;
  for (int j = 0; j < kTerms; ++j) {
    if (design.present[j]) mask |= 1u << j;
  }
  return mask;
}

// Which of the optional columns a fit leaves out because the samples cannot tell them apart.
struct Dropped {
  // A reduction grows with the same bytes as the transfer of its own primitive, so once each
  // primitive has its own transfer weight the reduction column is usually one of their
  // combinations: the reducing primitives' weights then carry its cost.
  bool reduce = false;
  // When every sample has the same rounds per step (e.g. only hand-offs, one round each), the
  // latency and step columns are proportional: the step keeps the base's cost.
  bool step = false;
};

// Checks that the samples determine every column of `design` (built with the step column),
// leaving out the reduction, then the step, then both, until they do.
Status chooseColumns(const Topology& base, const std::vector<CalibrationSample>& samples, Design& design,
                     Dropped& dropped) {
  const Design full = design;
  const bool canDropStep = full.present[kStep] && full.present[kLatency];
  for (const Dropped choice : {Dropped{}, Dropped{true, false}, Dropped{false, true}, Dropped{true, true}}) {
    if ((choice.reduce && !full.present[kReduce]) || (choice.step && !canDropStep)) continue;
    Design candidate;
    if (choice.step) {
      CHIMERA_RETURN_IF_ERROR(buildDesign(base, samples, false, candidate));
    } else {
      candidate = full;
    }
    if (choice.reduce) {
      candidate.present[kReduce] = false;
      for (Row& row : candidate.rows) row[kReduce] = 0;
    }
    Coefficients unconstrained{};
    if (solveSubset(candidate, presentMask(candidate), unconstrained)) {
      design = std::move(candidate);
      dropped = choice;
      return Status::ok();
    }
  }
  std::string terms;
  for (int j = 0; j < kTerms; ++j) {
    if (full.present[j]) terms += (terms.empty() ? "" : ", ") + termName(j);
  }
  return Status::invalidArgument(
      fmt::format("calibration samples do not determine the {} terms separately: measure several message sizes "
                  "of each primitive",
                  terms));
}

// Non-negative least squares: every transfer column the samples have, with or without the
// latency and reduction columns; the best solution whose coefficients are all >= 0 and
// whose transfer weights are > 0.
Status solveNonNegative(const Design& design, Coefficients& out) {
  const unsigned full = presentMask(design);
  const unsigned transfers = full & ~kOptional;
  double best = std::numeric_limits<double>::infinity();
  const unsigned optional = full & kOptional;
  for (unsigned extra = 0; extra <= optional; ++extra) {
    if ((extra & ~optional) != 0) continue;
    Coefficients c{};
    if (!solveSubset(design, transfers | extra, c)) continue;
    bool feasible = c[kLatency] >= 0 && c[kReduce] >= 0 && c[kStep] >= 0;
    for (int j = kFirstTransfer; j < kTerms; ++j) feasible = feasible && (!design.present[j] || c[j] > 0);
    if (!feasible) continue;
    const double r = weightedResidual(design, c);
    if (r < best) {
      best = r;
      out = c;
    }
  }
  CHIMERA_CHECK_ARG(std::isfinite(best), "calibration found no positive bandwidth that fits the samples");
  return Status::ok();
}

// 1.4826 x the median absolute relative error: a standard deviation that outliers do not inflate.
double robustScale(const Design& design, const Coefficients& c) {
  std::vector<double> errors;
  for (std::size_t i = 0; i < design.rows.size(); ++i) errors.push_back(std::fabs(relativeError(design, i, c)));
  std::nth_element(errors.begin(), errors.begin() + static_cast<std::ptrdiff_t>(errors.size() / 2), errors.end());
  return 1.4826 * errors[errors.size() / 2];
}

// Huber iteratively reweighted least squares: a sample whose relative error is far beyond the
// typical one (a noisy machine's outlier) is down-weighted instead of pulling the fit.
Status solveRobust(Design& design, Coefficients& out) {
  constexpr int kMaxIterations = 30;
  constexpr double kHuber = 1.345;  // the usual tuning constant (95 % efficiency on clean data)
  for (int iteration = 0; iteration < kMaxIterations; ++iteration) {
    CHIMERA_RETURN_IF_ERROR(solveNonNegative(design, out));
    const double cutoff = kHuber * robustScale(design, out);
    if (cutoff <= 1e-12) return Status::ok();  // (nearly) exact fit: nothing to down-weight
    double change = 0;
    for (std::size_t i = 0; i < design.rows.size(); ++i) {
      const double e = std::fabs(relativeError(design, i, out));
      const double w = e <= cutoff ? 1.0 : cutoff / e;
      change = std::max(change, std::fabs(w - design.weights[i]));
      design.weights[i] = w;
    }
    if (change < 1e-6) return Status::ok();
  }
  return Status::ok();
}

}  // namespace

CommStep sampleStep(const CalibrationSample& sample) {
  if (sample.primitive == OpKind::ManyToMany) {
    std::vector<Transfer> transfers;
    const int half = sample.groupSize / 2;
    for (int g = 0; g < sample.numGroups; ++g) {
      for (int i = 0; i < half; ++i) {
        const int rank = g * sample.groupSize + i;
        transfers.push_back({rank, rank + half, sample.bytesPerRank});
      }
    }
    return CommStep::manyToMany(std::move(transfers));
  }
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
  for (const OpKind kind : kTransferKinds) {
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
  CHIMERA_CHECK_ARG(!samples.empty(), "calibration needs samples of several sizes, got none");
  Design design;
  CHIMERA_RETURN_IF_ERROR(buildDesign(base, samples, true, design));
  int unknowns = 0;
  for (const bool present : design.present) unknowns += present ? 1 : 0;
  CHIMERA_CHECK_ARG(samples.size() >= static_cast<std::size_t>(unknowns),
                    "calibration needs at least {} samples for the {} terms they involve, got {}", unknowns, unknowns,
                    samples.size());
  Dropped dropped;
  CHIMERA_RETURN_IF_ERROR(chooseColumns(base, samples, design, dropped));
  const bool reduceAbsorbed = dropped.reduce;
  Coefficients c{};
  CHIMERA_RETURN_IF_ERROR(solveRobust(design, c));

  // The links' bandwidth takes the geometric mean of the primitives' transfer weights; each
  // measured primitive's factor keeps its weight relative to that mean.
  double logSum = 0;
  int measured = 0;
  for (int j = kFirstTransfer; j < kTerms; ++j) {
    if (!design.present[j]) continue;
    logSum += std::log(c[j]);
    ++measured;
  }
  const double transferWeight = std::exp(logSum / measured);
  Topology fitted = base;
  const double alphaScale = design.present[kLatency] ? c[kLatency] : 1.0;
  fitted.local.alphaSeconds *= alphaScale;
  fitted.cross.alphaSeconds *= alphaScale;
  fitted.local.bytesPerSecond /= transferWeight;
  fitted.cross.bytesPerSecond /= transferWeight;
  for (int j = kFirstTransfer; j < kTerms; ++j) {
    if (design.present[j])
      fitted.transferFactors.values[static_cast<std::size_t>(j - kFirstTransfer)] *= c[j] / transferWeight;
  }
  if (design.present[kReduce]) fitted.reduceSecondsPerByte = c[kReduce];
  if (reduceAbsorbed) fitted.reduceSecondsPerByte = 0;
  if (design.present[kStep]) fitted.stepSeconds = c[kStep];

  FitReport fit;
  fit.alphaScale = alphaScale;
  fit.bandwidthScale = 1.0 / transferWeight;
  fit.transferFactors = fitted.transferFactors;
  fit.reduceSecondsPerByte = fitted.reduceSecondsPerByte;
  fit.reduceFitted = design.present[kReduce];
  fit.reduceAbsorbed = reduceAbsorbed;
  fit.stepSeconds = fitted.stepSeconds;
  fit.stepKept = dropped.step;
  // Errors over every sample, unweighted: the report hides no outlier.
  const double scale = robustScale(design, c);
  double sumSquares = 0;
  for (std::size_t i = 0; i < design.rows.size(); ++i) {
    const double e = std::fabs(relativeError(design, i, c));
    fit.maxRelativeError = std::max(fit.maxRelativeError, e);
    sumSquares += e * e;
    if (e > 3 * scale && e > 1e-9) ++fit.outliers;
  }
  fit.rmsRelativeError = std::sqrt(sumSquares / static_cast<double>(design.rows.size()));
  fitted.calibration = {static_cast<int>(samples.size()), fit.rmsRelativeError};
  CHIMERA_RETURN_IF_ERROR(validateTopology(fitted));
  out = std::move(fitted);
  if (report != nullptr) *report = fit;
  return Status::ok();
}

}  // namespace chimera
