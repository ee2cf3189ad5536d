// SPDX-License-Identifier: Apache-2.0
// Output of chimera-plan (private): the human report and the JSON document.
#pragma once

#include <optional>
#include <string>

#include "chimera/planning/planner.hpp"
#include "chimera/planning/redundancy.hpp"
#include "common/json.hpp"

namespace chimera::detail {

/// Bytes crossing hosts (planLinkBytes), all ranks together.
struct LinkBytes {
  double baseline = 0;  ///< the chain as written
  double fused = 0;     ///< the best plan
};

/// What chimera-plan was asked, echoed in its output.
struct PlanQuery {
  std::string mesh;
  std::string chain;
  std::string cost;                    ///< the cost model's name
  std::optional<LinkBytes> linkBytes;  ///< set for a placed job (--hosts, --hostfile)
};

/// The report for people: the chain with bytes per op, the redundancy, the plan, and why.
std::string humanPlanReport(const PlanQuery& query, const ChainPlan& plan, const ChainAnalysis& analysis);

/// The JSON document: {"baseline": {"ops", "bytes_per_rank_max", "bytes_total"}, "fused":
/// {...}, "redundant_bytes_total", "unconsumed_bytes_total", "decision", "explain", ...}; a
/// placed job adds "link_bytes": {"baseline", "fused"}.
Json jsonPlanReport(const PlanQuery& query, const ChainPlan& plan, const ChainAnalysis& analysis);

}  // namespace chimera::detail
