// SPDX-License-Identifier: Apache-2.0
// Calibration (unstable tier): fitting a topology's cost constants to timings measured on
// the live backend (chimera-bench --calibrate).
#pragma once

#include <cstdint>
#include <vector>

#include "chimera/planning/comm_program.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// One measurement: `numGroups` groups of `groupSize` consecutive world ranks (group g =
/// ranks [g*groupSize, (g+1)*groupSize)) ran `primitive` concurrently with L =
/// `bytesPerRank`, and one run took `seconds` (e.g. the median of several iterations, the
/// slowest rank's time). For ManyToMany (point-to-point sends, as a pipeline hand-off)
/// member i of the first half of each group sends L bytes to member i + groupSize / 2.
struct CalibrationSample {
  OpKind primitive = OpKind::AllReduce;  ///< a collective or ManyToMany (one of kTransferKinds)
  int groupSize = 0;                     ///< ranks per group (>= 2)
  int numGroups = 1;                     ///< concurrent groups (>= 1)
  std::uint64_t bytesPerRank = 0;        ///< L as in CommStep (> 0)
  double seconds = 0;                    ///< measured time (> 0)
};

/// What a fit found.
struct FitReport {
  double alphaScale = 1;            ///< factor applied to every link class's alpha
  double bandwidthScale = 1;        ///< factor applied to every link class's bandwidth
  TransferFactors transferFactors;  ///< the fitted topology's per-primitive factors
  double stepSeconds = 0;           ///< fitted fixed cost of one step (the base's when no sample moves bytes)
  /// Every sample had the same rounds per step, so the step cost could not be told from the
  /// latency: the profile keeps the base's step cost and the latency carries the rest.
  bool stepKept = false;
  double reduceSecondsPerByte = 0;  ///< fitted reduction cost (the base value when no sample reduces)
  bool reduceFitted = false;        ///< whether the samples determined the reduction cost on its own
  /// The reduction cost grew with the same bytes as the reducing primitives' transfers, so it
  /// could not be told apart: their transfer factors carry it and the profile's reduction cost is 0.
  bool reduceAbsorbed = false;
  double rmsRelativeError = 0;  ///< over all samples (unweighted), after the fit
  double maxRelativeError = 0;  ///< largest |predicted - measured| / measured after the fit
  /// Samples whose error exceeds 3 robust standard deviations (1.4826 x the median absolute
  /// error): the fit down-weighted them as outliers.
  int outliers = 0;
};

/// Fits `base`'s parameters to measurements by non-negative least squares on relative
/// error: predicted(sample) = a * latency + b_k * transfer + gamma * reducedBytes + s (the
/// fixed cost of a step that moves bytes) + the base's other fixed costs, where the terms
/// come from the cost model of `base` and b_k is a weight per primitive k measured (a
/// transport picks its own algorithm per collective). The squares are Huber-weighted
/// (iteratively reweighted), so a few outlying measurements of a noisy machine do not pull
/// the fit; the report counts them. The result keeps `base`'s fabric and ratios between
/// link classes, with every alpha scaled by a, every bandwidth divided by the geometric mean
/// b of the b_k, each measured primitive's transfer factor multiplied by b_k / b, the
/// reduction cost set to gamma and the step cost to s. When the reduction cannot be told
/// apart from the reducing primitives' transfers (it grows with the same bytes), their
/// factors carry it and the reduction cost is 0 (FitReport::reduceAbsorbed). When every
/// sample has the same rounds per step (only hand-offs, say), the step cost cannot be told
/// from the latency: it keeps the base's value (FitReport::stepKept).
/// `out.calibration` records the sample count and the fit error. InvalidArgument when a
/// sample is malformed (named by index), there are fewer samples than parameters, or the
/// samples do not determine the terms (e.g. all of one size). `out` is unchanged on error.
[[nodiscard]] Status fitProfile(const Topology& base, const std::vector<CalibrationSample>& samples, Topology& out,
                                FitReport* report = nullptr);

/// The CommStep a sample describes (its groups spelled out).
CommStep sampleStep(const CalibrationSample& sample);

/// What to measure for a fit on `worldSize` ranks (seconds left 0 for the caller to fill
/// in): every collective and ManyToMany (kTransferKinds), for every group size g = 2, 4,
/// 8, ... dividing worldSize run as worldSize / g concurrent groups, at sizes minBytes,
/// 4 minBytes, 16 minBytes, ... up to maxBytes, each rounded down to a multiple of 16 g
/// bytes (so ReduceScatter and AllToAll blocks are whole elements of any dtype).
/// InvalidArgument when worldSize < 2, minBytes is 0 or minBytes > maxBytes.
[[nodiscard]] Status calibrationPoints(int worldSize, std::uint64_t minBytes, std::uint64_t maxBytes,
                                       std::vector<CalibrationSample>& out);

}  // namespace chimera
