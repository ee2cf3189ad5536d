// SPDX-License-Identifier: Apache-2.0
// TopologyCost (unstable tier): the PlanCost that prices plans with the cost model on a
// topology, for the planner's decision.
#pragma once

#include <memory>
#include <optional>
#include <string_view>

#include "chimera/planning/comm_program.hpp"
#include "chimera/planning/cost_model.hpp"
#include "chimera/planning/plan.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/planning/topology.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// The communication of `plan` as a program the cost model prices, on world ranks: each
/// collective runs in every group (along the step's axes) that holds its input, with L =
/// the input buffer's local bytes (Broadcast groups rotated so the root comes first); Send
/// becomes the many-to-many step of its stage hand-offs; ManyToMany keeps its transfers;
/// LocalCopy and Scale become many-to-many steps without transfers. Every step carries the
/// local passes the executor makes around it (stepLocalWork: packs and unpacks of blocks that
/// are not contiguous, unless a transport that `movesBoxes` moves them as boxes; box copies,
/// scales) as CommStep::localBytes / localLaunches. InvalidArgument when a Send has no next
/// stage or the plan names no mesh.
[[nodiscard]] Status planProgram(const Plan& plan, CommProgram& out, bool movesBoxes = false);

/// The bytes planProgram(plan) moves between domains on `model`'s topology (between hosts on a
/// host network), all ranks together, as its steps' algorithms run (StepCost::crossBytes).
/// The errors of planProgram and CostModel::predictStep.
[[nodiscard]] Status planLinkBytes(const CostModel& model, const Plan& plan, double& out);

/// The planner's cost from the topology model: value = predicted seconds of planProgram(plan)
/// on the topology, tie broken by the bytes all ranks send. A plan that cannot be priced
/// (a mesh larger than the topology, a malformed step) gets an infinite value and says why
/// in its summary; the planner never decides between unpriced plans: checkMesh rejects a
/// mesh the topology does not cover, and an unpriced chain is an error. Deterministic, as
/// PlanCost requires.
class TopologyCost final : public PlanCost {
 public:
  /// Prices plans on `topology` (see CostModel for an invalid one); a fused plan must save
  /// the topology's fusionMargin of the chain's predicted time.
  explicit TopologyCost(Topology topology);
  /// The topology's name ("pcie-4080x8"), shown in explain output.
  std::string_view name() const override;
  /// Predicted time of `plan`; summary "1.71 ms on pcie-4080x8".
  CostPrediction predict(const Plan& plan) const override;
  /// InvalidArgument when the topology is invalid or has fewer ranks than `mesh`, naming
  /// both counts and a topology that would cover the mesh.
  [[nodiscard]] Status checkMesh(const Mesh& mesh) const override;
  /// Topology::fusionMargin.
  double fusionMargin() const override { return model_.topology().fusionMargin; }
  /// The model used.
  const CostModel& model() const { return model_; }

 private:
  CostModel model_;
};

/// The cost model `name` selects: "bytes" (BytesCost, bytes alone) or a topology preset or
/// profile file (`loadTopology`) priced by TopologyCost, its Topology::movesBoxes replaced by
/// `movesBoxes` when given (an Executor or Session passes its backend's
/// movesBoxesEverywhere). InvalidArgument naming `name` when it is neither.
[[nodiscard]] Status loadPlanCost(std::string_view name, std::unique_ptr<PlanCost>& out,
                                  std::optional<bool> movesBoxes = std::nullopt);

}  // namespace chimera
