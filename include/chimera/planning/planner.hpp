// SPDX-License-Identifier: Apache-2.0
// The planner (unstable tier): plans a chain as written and as the cheapest candidate
// program, and decides between them with a PlanCost.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/plan.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera {

/// A cost prediction for a plan: lower `value` is better; `tieBreak` decides between equal
/// values. `summary` says what the numbers are ("1.5 GiB total, 192 MiB max per rank").
struct CostPrediction {
  double value = 0;
  double tieBreak = 0;
  std::string summary;
};

/// Prices plans for the planner. The planner picks the candidate with the lowest
/// prediction and fuses only when the fused plan is predicted cheaper than the chain as
/// written by more than the cost's fusion margin (fusionPays). Implementations must be
/// deterministic (every rank must agree).
class PlanCost {
 public:
  virtual ~PlanCost() = default;
  /// Short name for explain output ("bytes").
  virtual std::string_view name() const = 0;
  /// Prediction for `plan`.
  virtual CostPrediction predict(const Plan& plan) const = 0;
  /// Whether plans on `mesh` can be priced at all; the planner calls it first and fails
  /// with its error, so that no decision rests on unpriced plans. Default: any mesh.
  [[nodiscard]] virtual Status checkMesh(const Mesh& mesh) const {
    (void)mesh;
    return Status::ok();
  }
  /// The share of the chain's predicted value a fused plan must save to be chosen, in
  /// [0, 1): the cost's own error, so that fusion is not taken on a predicted gain the
  /// prediction cannot resolve. Default 0: any strict gain counts.
  virtual double fusionMargin() const { return 0; }
};

/// The cost by bytes alone: value = bytes sent by all ranks together, tie broken by the
/// largest bytes any one rank sends. Knows nothing of topology.
class BytesCost final : public PlanCost {
 public:
  std::string_view name() const override { return "bytes"; }
  CostPrediction predict(const Plan& plan) const override;
};

/// Plans the cheapest program that turns a tensor of `spec` placed as `from` into `to`
/// (also across pipeline stages), multiplying the values by `scale` on the way (the
/// effect of sums over replicated axes; 1 for none). One mechanism: reduce the partial axes
/// `to` does not keep (AllReduce, ReduceScatter toward any dim, or hierarchical), then move
/// data by box intersection (many-to-many, or the single collective it collapses to), and
/// gather at the destination only if that is cheaper. InvalidArgument when `to` cannot be
/// reached (it is partial where `from` is not, layouts invalid for `spec`).
/// `candidates`, if given, receives the number of candidate programs priced.
/// With `rank` (a rank of the mesh, not kWorldPlan) the result is that rank's plan: the
/// world plan with only the box transfers `rank` sends or receives, found without building
/// any other rank's (see Plan). The choice is made from every rank's flows, so each rank's
/// plan is its part of the one world plan.
[[nodiscard]] Status planRedistribution(const TensorSpec& spec, const Layout& from, const Layout& to,
                                        std::int64_t scale, const PlanCost& cost, Plan& out, int* candidates = nullptr,
                                        int rank = kWorldPlan);

/// The chain exactly as written, as a Plan of the same step types (one step per op, then a
/// LocalCopy to `consumed` when it differs from the chain's final layout).
[[nodiscard]] Status baselinePlan(const TensorSpec& spec, const ChainTrace& trace, const Layout& consumed, Plan& out);

/// True when `a` is predicted strictly cheaper than `b` under `cost`: a lower value, then a
/// lower tie-break, then fewer bytes through local passes (planLocalBytes: packs, unpacks,
/// copies), then fewer steps.
bool predictedCheaper(const Plan& a, const Plan& b, const PlanCost& cost);

/// True when a predicted `fused` value is at most (1 - margin) times the `written` one: the
/// fusion margin's rule, for plans (fusionPays) and for programs (CostModel::decide) alike.
bool gainClearsMargin(double fused, double written, double margin);

/// True when `fused` is predicted cheaper than `written` (predictedCheaper) and its value
/// clears the cost's fusion margin (gainClearsMargin with cost.fusionMargin()). The planner's decision
/// between the best plan and the chain as written; a Session's between a fused plan (with any
/// copy it adds) and the calls as recorded.
bool fusionPays(const Plan& fused, const Plan& written, const PlanCost& cost);

/// Everything the planner decides about one chain.
struct ChainPlan {
  ChainTrace trace;  ///< the chain applied to its start layout
  Layout consumed;   ///< what the consumer reads (the final layout by default)
  Plan baseline;     ///< the chain as written
  Plan fused;        ///< the best plan found (even when the decision is baseline)
  PlanBytes baselineBytes;
  PlanBytes fusedBytes;
  CostPrediction baselineCost;
  CostPrediction fusedCost;
  bool useFused = false;              ///< the decision
  int candidates = 0;                 ///< candidate programs priced
  std::vector<std::string> rewrites;  ///< named rewrites the fused plan embodies
  std::string explain;                ///< why, in a few sentences
  /// The plan to run.
  const Plan& chosen() const { return useFused ? fused : baseline; }
};

/// Traces `chain` from `from` (checking every precondition), checks that `consumed` (or the
/// final layout when empty) is readable after it, builds the baseline and the fused plan
/// and decides with `cost`. Deterministic: every rank derives the identical result.
/// With `rank` (not kWorldPlan), both plans are that rank's (planRedistribution); the
/// decision, costs, byte counts and explanation are the world's, identical on every rank.
[[nodiscard]] Status planChain(const TensorSpec& spec, const Layout& from, const Chain& chain,
                               const std::optional<Layout>& consumed, const PlanCost& cost, ChainPlan& out,
                               int rank = kWorldPlan);

}  // namespace chimera
