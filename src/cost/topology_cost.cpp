// SPDX-License-Identifier: Apache-2.0
// Plugs the topology model into the planner: a Plan is turned into the CommProgram the
// cost model prices.
#include "chimera/planning/topology_cost.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include "core/check.hpp"

namespace chimera {

namespace {

// The groups along `axes` that hold `buffer`, each ordered by group index, in order of
// their lowest rank.
std::vector<std::vector<int>> holdingGroups(const PlanBuffer& buffer, AxisSet axes) {
  const Mesh& mesh = buffer.layout.mesh();
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(static_cast<std::size_t>(mesh.size()), false);
  for (const int rank : buffer.layout.holders()) {
    if (seen[static_cast<std::size_t>(rank)]) continue;
    std::vector<int> group = mesh.groupRanks(rank, axes);
    for (const int member : group) seen[static_cast<std::size_t>(member)] = true;
    groups.push_back(std::move(group));
  }
  return groups;
}

// The input holders send their whole buffer to the rank of the output's stage along the axis.
Status sendTransfers(const PlanBuffer& input, const PlanBuffer& output, const PlanStep& step,
                     std::vector<Transfer>& out) {
  const Mesh& mesh = input.layout.mesh();
  const int stages = mesh.groupSize(step.axes);
  const int axis = std::countr_zero(step.axes.bits());
  CHIMERA_CHECK_ARG(std::popcount(step.axes.bits()) == 1 && output.layout.placement(axis).isStage(),
                    "send along axis set {:#x} into layout {}: needs one axis and a stage placement", step.axes.bits(),
                    output.layout.toString());
  const int target = output.layout.placement(axis).stage;
  CHIMERA_CHECK_ARG(target >= 0 && target < stages, "send to stage {} of {}", target, stages);
  for (const int rank : input.layout.holders()) {
    out.push_back({rank, mesh.groupPeer(rank, step.axes, target), static_cast<std::uint64_t>(input.localBytes)});
  }
  return Status::ok();
}

// The local passes the executor makes around `step`, on the busiest rank.
void addLocalWork(const Plan& plan, const PlanStep& step, bool movesBoxes, CommStep& out) {
  const LocalWork work = stepLocalWork(plan, step, movesBoxes);
  out.localBytes += work.bytes;
  out.localLaunches += work.launches;
  if (work.ranks > 0) out.localRanks = work.ranks;
}

Status stepProgram(const Plan& plan, const PlanStep& step, bool movesBoxes, CommProgram& out) {
  CHIMERA_CHECK_ARG(step.input >= 0 && static_cast<std::size_t>(step.input) < plan.buffers.size(),
                    "plan step '{}' reads buffer {} of {}", planStepKindName(step.kind), step.input,
                    plan.buffers.size());
  const PlanBuffer& input = plan.buffers[static_cast<std::size_t>(step.input)];
  const auto bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, input.localBytes));
  auto collective = [&](OpKind kind) {
    out.push_back(CommStep::collective(kind, holdingGroups(input, step.axes), bytes));
  };
  switch (step.kind) {
    case PlanStep::Kind::AllReduce:
    case PlanStep::Kind::ReduceScatter:
    case PlanStep::Kind::AllGather:
    case PlanStep::Kind::AllToAll: collective(step.kind); break;
    case PlanStep::Kind::Broadcast: {
      std::vector<std::vector<int>> groups = holdingGroups(input, step.axes);
      for (auto& group : groups) {
        CHIMERA_CHECK_ARG(step.root >= 0 && static_cast<std::size_t>(step.root) < group.size(),
                          "broadcast root {} outside its group of {}", step.root, group.size());
        std::rotate(group.begin(), group.begin() + step.root, group.end());
      }
      out.push_back(CommStep::collective(OpKind::Broadcast, std::move(groups), bytes));
      break;
    }
    case PlanStep::Kind::Send: {
      CHIMERA_CHECK_ARG(step.output >= 0 && static_cast<std::size_t>(step.output) < plan.buffers.size(),
                        "plan step 'send' writes buffer {} of {}", step.output, plan.buffers.size());
      std::vector<Transfer> transfers;
      const PlanBuffer& output = plan.buffers[static_cast<std::size_t>(step.output)];
      CHIMERA_RETURN_IF_ERROR(sendTransfers(input, output, step, transfers));
      out.push_back(CommStep::manyToMany(std::move(transfers)));
      break;
    }
    case PlanStep::Kind::ManyToMany: {
      std::vector<Transfer> transfers;
      for (const TransferFlow& f : step.flows) {
        transfers.push_back({f.src, f.dst, static_cast<std::uint64_t>(std::max<std::int64_t>(0, f.bytes))});
      }
      out.push_back(CommStep::manyToMany(std::move(transfers)));
      break;
    }
    case PlanStep::Kind::LocalCopy:
    case PlanStep::Kind::Scale:
      // Local work only: an empty many-to-many that carries the pass.
      out.push_back(CommStep::manyToMany({}));
      break;
    default: return Status::invalidArgument(fmt::format("{} is not a kind of plan step", opKindName(step.kind)));
  }
  CHIMERA_CHECK_ARG(step.output >= 0 && static_cast<std::size_t>(step.output) < plan.buffers.size(),
                    "plan step '{}' writes buffer {} of {}", planStepKindName(step.kind), step.output,
                    plan.buffers.size());
  addLocalWork(plan, step, movesBoxes, out.back());
  return Status::ok();
}

}  // namespace

Status planProgram(const Plan& plan, CommProgram& out, bool movesBoxes) {
  CHIMERA_CHECK_ARG(!plan.buffers.empty(), "plan has no buffers, so no mesh to place its steps on");
  CommProgram program;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const Status status = stepProgram(plan, plan.steps[i], movesBoxes, program);
    if (!status.isOk()) return Status(status.code(), fmt::format("plan step {}: {}", i, status.message()));
  }
  out = std::move(program);
  return Status::ok();
}

Status planLinkBytes(const CostModel& model, const Plan& plan, double& out) {
  CommProgram program;
  CHIMERA_RETURN_IF_ERROR(planProgram(plan, program, model.topology().movesBoxes));
  double bytes = 0;
  for (const CommStep& step : program) {
    StepCost cost;
    CHIMERA_RETURN_IF_ERROR(model.predictStep(step, cost));
    bytes += cost.crossBytes;
  }
  out = bytes;
  return Status::ok();
}

TopologyCost::TopologyCost(Topology topology) : model_(std::move(topology)) {}

Status loadPlanCost(std::string_view name, std::unique_ptr<PlanCost>& out, std::optional<bool> movesBoxes) {
  if (name == "bytes") {
    out = std::make_unique<BytesCost>();
    return Status::ok();
  }
  Topology topology;
  CHIMERA_RETURN_IF_ERROR(loadTopology(name, topology));
  if (movesBoxes) topology.movesBoxes = *movesBoxes;
  out = std::make_unique<TopologyCost>(std::move(topology));
  return Status::ok();
}

std::string_view TopologyCost::name() const { return model_.topology().name; }

Status TopologyCost::checkMesh(const Mesh& mesh) const {
  const Topology& topology = model_.topology();
  CHIMERA_RETURN_IF_ERROR(validateTopology(topology));
  if (mesh.size() <= topology.ranks) return Status::ok();
  const int perNode =
      topology.fabric == Fabric::NvSwitchMultiNode && topology.ranksPerDomain > 0 ? topology.ranksPerDomain : 8;
  const int nodes = (mesh.size() + perNode - 1) / perNode;
  return Status::invalidArgument(
      fmt::format("mesh {} has {} ranks but topology '{}' has {} GPUs: price it on one that covers the mesh "
                  "(multinode-ib:{} for nodes of 8, or a profile with at least {} ranks)",
                  mesh.toString(), mesh.size(), topology.name, topology.ranks, nodes, mesh.size()));
}

CostPrediction TopologyCost::predict(const Plan& plan) const {
  CostPrediction prediction;
  prediction.tieBreak = static_cast<double>(planBytes(plan).total);
  CommProgram program;
  Status status = planProgram(plan, program, model_.topology().movesBoxes);
  double seconds = 0;
  if (status.isOk()) status = model_.predict(program, seconds);
  if (!status.isOk()) {
    prediction.value = std::numeric_limits<double>::infinity();
    prediction.summary = fmt::format("not priced on {}: {}", name(), status.message());
    return prediction;
  }
  prediction.value = seconds;
  prediction.summary = fmt::format("{} on {}", formatSeconds(seconds), name());
  return prediction;
}

}  // namespace chimera
