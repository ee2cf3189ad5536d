// SPDX-License-Identifier: Apache-2.0
// chimera-bench --calibrate --out profile.json: measures the live backend at the cost
// model's calibration points (calibrationPoints), fits the --topology preset (default host)
// to them with fitProfile, prints measured vs fitted times and writes the profile, which
// --topology profile.json (here, in chimera-plan, or in any TopologyCost) loads back.
#pragma once

#include "options.hpp"

namespace chimera::bench {

/// Runs the calibration the options describe (-b/-e: the size range, default 1M..16M; -n,
/// -w, --backend, --topology: the preset to fit). Collective over MPI_COMM_WORLD; a failure
/// is returned on every rank.
[[nodiscard]] Status runCalibration(const Options& options);

}  // namespace chimera::bench
