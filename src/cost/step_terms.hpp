// SPDX-License-Identifier: Apache-2.0
// The alpha-beta terms of one step (private), before they are weighted into seconds:
// shared by the cost model (which adds them up) and calibration (which fits their weights).
#pragma once

#include <string>

#include "chimera/planning/comm_program.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/status.hpp"

namespace chimera::detail {

/// The terms of one step's predicted time.
struct StepTerms {
  double latencySeconds = 0;   ///< sum of the rounds' alphas
  double transferSeconds = 0;  ///< sum of the rounds' busiest-resource times, times the primitive's transfer factor
  /// Bytes reduced one after another on the critical path, already multiplied by the
  /// core-sharing factor; times topology.reduceSecondsPerByte gives the reduce term.
  double reducedBytes = 0;
  /// Fixed costs: stepSeconds when the step moves bytes, peerSeconds per peer of the
  /// busiest rank beyond the first, launchSeconds per local kernel.
  double overheadSeconds = 0;
  int steps = 0;            ///< 1 when the step moves bytes (its overhead includes stepSeconds), else 0
  double localSeconds = 0;  ///< localPassSeconds of the step's local bytes (0 when unmodelled)
  std::string bottleneck;   ///< the resource limiting the largest round ("" if none)
  double crossBytes = 0;    ///< bytes moved between domains over all rounds (StepCost::crossBytes)
};

/// Expands `step` into its algorithm's rounds on `topology` and prices them.
/// InvalidArgument when the topology fails validateTopology or the step fails
/// validateStep for topology.ranks.
[[nodiscard]] Status stepTerms(const Topology& topology, const CommStep& step, StepTerms& out);

}  // namespace chimera::detail
