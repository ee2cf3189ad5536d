// SPDX-License-Identifier: Apache-2.0
// Implements the cost model: the time of a communication program on a topology.
#include "chimera/planning/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "chimera/planning/planner.hpp"
#include "core/check.hpp"
#include "cost/step_terms.hpp"

namespace chimera {

CostModel::CostModel(Topology topology) : topology_(std::move(topology)) {}

Status CostModel::predictStep(const CommStep& step, StepCost& out) const {
  detail::StepTerms terms;
  CHIMERA_RETURN_IF_ERROR(detail::stepTerms(topology_, step, terms));
  StepCost cost;
  cost.latencySeconds = terms.latencySeconds;
  cost.transferSeconds = terms.transferSeconds;
  cost.reduceSeconds = terms.reducedBytes * topology_.reduceSecondsPerByte;
  cost.overheadSeconds = terms.overheadSeconds;
  cost.localSeconds = terms.localSeconds;
  cost.seconds =
      cost.latencySeconds + cost.transferSeconds + cost.reduceSeconds + cost.overheadSeconds + cost.localSeconds;
  cost.bottleneck = std::move(terms.bottleneck);
  cost.crossBytes = terms.crossBytes;
  out = std::move(cost);
  return Status::ok();
}

Status CostModel::predict(const CommProgram& program, double& seconds) const {
  double total = 0;
  for (std::size_t i = 0; i < program.size(); ++i) {
    StepCost cost;
    const Status status = predictStep(program[i], cost);
    if (!status.isOk()) return Status(status.code(), fmt::format("step {}: {}", i, status.message()));
    total += cost.seconds;
  }
  seconds = total;
  return Status::ok();
}

Status CostModel::decide(const CommProgram& baseline, const CommProgram& fused, FusionDecision& out) const {
  FusionDecision decision;
  Status status = predict(baseline, decision.baselineSeconds);
  if (!status.isOk()) return Status(status.code(), "baseline program: " + status.message());
  status = predict(fused, decision.fusedSeconds);
  if (!status.isOk()) return Status(status.code(), "fused program: " + status.message());
  const double margin = topology_.fusionMargin;
  decision.fuse = decision.fusedSeconds < decision.baselineSeconds &&
                  gainClearsMargin(decision.fusedSeconds, decision.baselineSeconds, margin);
  decision.explanation =
      fmt::format("fused {} vs baseline {} on {}: {}", formatSeconds(decision.fusedSeconds),
                  formatSeconds(decision.baselineSeconds), topology_.name, decision.fuse ? "fuse" : "keep baseline");
  if (!decision.fuse && decision.fusedSeconds < decision.baselineSeconds)
    decision.explanation += fmt::format(", the gain within the {:.0f}% fusion margin", 100 * margin);
  if (decision.fusedSeconds > 0) {
    decision.explanation +=
        fmt::format(" (predicted speedup {:.2f}x)", decision.baselineSeconds / decision.fusedSeconds);
  }
  out = std::move(decision);
  return Status::ok();
}

double localPassSeconds(const Topology& topology, double bytes, int passingRanks) {
  if (topology.device.memoryBytesPerSecond <= 0 || bytes <= 0) return 0;
  double speedup = 1;
  if (topology.computeSlots > 0) {
    const int passing = passingRanks > 0 ? std::min(passingRanks, topology.ranks) : topology.ranks;
    // On a host network each host has its cores: the ranks of one host (spread evenly) share them.
    const double hosts = topology.fabric == Fabric::HostNetwork ? domainCount(topology) : 1;
    const double slots = topology.computeSlots;
    speedup = std::max(1.0, topology.ranks / hosts / slots) / std::max(1.0, passing / hosts / slots);
  }
  return 2.0 * bytes / (topology.device.memoryBytesPerSecond * speedup);
}

std::string formatSeconds(double seconds) {
  const double magnitude = std::fabs(seconds);
  if (magnitude >= 1.0) return fmt::format("{:.3g} s", seconds);
  if (magnitude >= 1e-4) return fmt::format("{:.3g} ms", seconds * 1e3);
  return fmt::format("{:.3g} us", seconds * 1e6);
}

}  // namespace chimera
