// SPDX-License-Identifier: Apache-2.0
// Implements chimera-plan's output: the human report and the JSON document.
#include "tools/plan_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace chimera::detail {
namespace {

std::string size(std::int64_t bytes) {
  if (bytes >= (1LL << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / 1048576.0);
  if (bytes >= (1LL << 10)) return fmt::format("{:.2f} KiB", static_cast<double>(bytes) / 1024.0);
  return fmt::format("{} B", bytes);
}

Json planJson(const Plan& plan, const PlanBytes& bytes) {
  Json ops = Json::array();
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& step = plan.steps[i];
    const auto& perRank = bytes.stepPerRank[i];
    ops.push_back(Json::object({{"op", planStepText(plan, step)},
                                {"from", plan.buffers[static_cast<std::size_t>(step.input)].layout.toString()},
                                {"to", plan.buffers[static_cast<std::size_t>(step.output)].layout.toString()},
                                {"bytes_per_rank_max", *std::max_element(perRank.begin(), perRank.end())},
                                {"bytes_total", std::accumulate(perRank.begin(), perRank.end(), std::int64_t{0})}}));
  }
  return Json::object(
      {{"ops", std::move(ops)}, {"bytes_per_rank_max", bytes.maxPerRank}, {"bytes_total", bytes.total}});
}

// The box transfers a rank's plan holds (those it sends or receives, itself included).
std::int64_t rankTransfers(const Plan& plan) {
  std::int64_t count = 0;
  for (const PlanStep& step : plan.steps) count += static_cast<std::int64_t>(step.transfers.size());
  return count;
}

}  // namespace

std::string humanPlanReport(const PlanQuery& query, const ChainPlan& plan, const ChainAnalysis& analysis) {
  const Layout& from = plan.trace.layouts.front();
  std::string text =
      fmt::format("mesh {}, tensor {} ({} in all, {} per rank at the start)\n", query.mesh, plan.fused.spec.toString(),
                  size(plan.fused.spec.bytes()), size(from.localBytes(plan.fused.spec)));
  text += fmt::format("from {}  chain {}  consume {}\n\n", from.toString(), query.chain, plan.consumed.toString());
  text += "chain as written (L = local bytes before the op, n = group size):\n";
  text += fmt::format("  {:<28} {:>12} {:>4} {:>6} {:>14} {:>14} {:>14}\n", "op", "L", "n", "ranks", "max per rank",
                      "total", "unconsumed");
  for (std::size_t i = 0; i < analysis.ops.size(); ++i) {
    const auto& op = analysis.ops[i];
    text += fmt::format("  {:<28} {:>12} {:>4} {:>6} {:>14} {:>14} {:>14}   -> {}\n", op.op, size(op.localBytes),
                        op.groupSize, op.participants, size(op.bytesPerRankMax), size(op.bytesTotal),
                        analysis.unconsumedAnalysed ? size(op.unconsumedTotal) : std::string("-"),
                        plan.trace.layouts[i + 1].toString());
  }
  if (analysis.unconsumedAnalysed) {
    text += fmt::format("  total {} ({} max per rank); {} of it carry data never consumed\n\n",
                        size(analysis.bytesTotal), size(analysis.bytesPerRankMax), size(analysis.unconsumedTotal));
  } else {
    text += fmt::format("  total {} ({} max per rank); unconsumed bytes not analysed (too many ranks x blocks)\n\n",
                        size(analysis.bytesTotal), size(analysis.bytesPerRankMax));
  }
  text += fmt::format("best plan ({} candidates priced):\n", plan.candidates);
  text += plan.fused.toString();
  if (plan.fused.rank != kWorldPlan) {
    text +=
        fmt::format("  planned as rank {}: each manytomany holds only the {} transfers this rank sends or receives\n",
                    plan.fused.rank, rankTransfers(plan.fused));
  }
  text +=
      fmt::format("  total {} ({} max per rank)\n\n", size(plan.fusedBytes.total), size(plan.fusedBytes.maxPerRank));
  const std::int64_t redundant = std::max<std::int64_t>(0, plan.baselineBytes.total - plan.fusedBytes.total);
  text += fmt::format("redundant bytes (chain minus best plan): {}\n", size(redundant));
  if (query.linkBytes) {
    text += fmt::format("bytes crossing hosts: chain {}, best plan {}\n",
                        size(static_cast<std::int64_t>(query.linkBytes->baseline)),
                        size(static_cast<std::int64_t>(query.linkBytes->fused)));
  }
  text +=
      fmt::format("decision ({} cost): {}\nwhy: {}\n", query.cost, plan.useFused ? "fused" : "baseline", plan.explain);
  return text;
}

Json jsonPlanReport(const PlanQuery& query, const ChainPlan& plan, const ChainAnalysis& analysis) {
  Json baseline = planJson(plan.baseline, plan.baselineBytes);
  Json ops = Json::array();
  for (const auto& op : analysis.ops) {
    ops.push_back(Json::object({{"op", op.op},
                                {"local_bytes", op.localBytes},
                                {"group_size", op.groupSize},
                                {"participants", op.participants},
                                {"bytes_per_rank_max", op.bytesPerRankMax},
                                {"bytes_total", op.bytesTotal},
                                {"unconsumed_bytes_total", op.unconsumedTotal}}));
  }
  baseline["ops"] = std::move(ops);  // the chain as written, op by op, replaces the baseline plan's steps
  Json out = Json::object({
      {"mesh", query.mesh},
      {"tensor", plan.fused.spec.toString()},
      {"from", plan.trace.layouts.front().toString()},
      {"chain", query.chain},
      {"consume", plan.consumed.toString()},
      {"cost_model", query.cost},
      {"baseline", std::move(baseline)},
      {"fused", planJson(plan.fused, plan.fusedBytes)},
      {"baseline_prediction", plan.baselineCost.summary},
      {"fused_prediction", plan.fusedCost.summary},
      // The costs' values (seconds under a topology, bytes under 'bytes'), for tables and plots.
      {"baseline_cost", plan.baselineCost.value},
      {"fused_cost", plan.fusedCost.value},
      {"redundant_bytes_total", std::max<std::int64_t>(0, plan.baselineBytes.total - plan.fusedBytes.total)},
      {"unconsumed_bytes_total", analysis.unconsumedTotal},
      {"unconsumed_analysed", analysis.unconsumedAnalysed},
      {"decision", plan.useFused ? "fused" : "baseline"},
      {"explain", plan.explain},
  });
  if (query.linkBytes) {  // a placed job (chimera-plan --hosts)
    out["link_bytes"] = Json::object({{"baseline", static_cast<std::int64_t>(std::llround(query.linkBytes->baseline))},
                                      {"fused", static_cast<std::int64_t>(std::llround(query.linkBytes->fused))}});
  }
  if (plan.fused.rank != kWorldPlan) {  // planned as one rank (chimera-plan --rank)
    out["rank"] = static_cast<std::int64_t>(plan.fused.rank);
    out["rank_transfers"] = rankTransfers(plan.fused);
  }
  return out;
}

}  // namespace chimera::detail
