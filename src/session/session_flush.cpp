// SPDX-License-Identifier: Apache-2.0
// Flushing a window: look its plan up (or plan it, agreeing within the window's scope: the
// world when recorded SPMD, its groups and hand-off peers when per rank), then run it.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "core/check.hpp"
#include "exec/box_blocks.hpp"
#include "exec/prepared_plan.hpp"
#include "session/hand_off.hpp"
#include "session/session_impl.hpp"

namespace chimera {
namespace {

constexpr const char* kLog = "session";

}  // namespace

// One agreement (common/agreement.hpp: a MIN allReduce) over the agreement scope (SPMD: the
// world) of {hash, failed, aliased per value}, the flags padded to kMaxWindowValues (a fixed
// size, so ranks with different windows still meet): equal hashes prove every rank of the
// scope recorded the same window; the aliasing verdicts are OR-ed, so every rank materialises
// a value aliased on any rank. A window with byte-range declarations then OR-s the flags of their candidate
// layouts (equal windows have equal candidate lists), so every rank resolves a range to a
// layout that holds every rank's range.
Status Session::Impl::agree(const detail::WindowKey& key, const Status& local, Verdicts& out) {
  std::vector<std::uint8_t>& flags = agreementFlags;
  flags.assign(key.aliased.begin(), key.aliased.end());
  flags.resize(Session::kMaxWindowValues, 0);
  const AxisSet scope = agreementScope();
  std::vector<AxisSet> groups;
  CHIMERA_RETURN_IF_ERROR(agreementGroups(scope, groups));
  detail::SignatureVerdict verdict;
  const std::uint64_t before = reduction.collectives();
  const detail::GroupMin min = reduction.over(groups, options.stream);
  Status agreed = detail::agreeOnSignature(key.sharedHash, !local.isOk(), backend.rank(), flags, min, verdict);
  stats.agreements += reduction.collectives() - before;
  CHIMERA_RETURN_IF_ERROR(agreed);
  if (!local.isOk()) return local;
  if (verdict.anyFailed) {
    return Status::mismatch(fmt::format("rank {} failed to prepare the window this rank flushed", verdict.failedRank));
  }
  if (!verdict.sameHash()) {
    return Status::mismatch(fmt::format(
        "ranks recorded different windows (calls or consume declarations differ): rank {} has {} (hash {:#x}), "
        "the hashes of group {} range over [{:#x}, {:#x}]",
        backend.rank(), detail::windowText(window), key.sharedHash, backend.mesh().axesName(scope), verdict.lowHash,
        verdict.highHash));
  }
  out.aliased.assign(verdict.flags.begin(), verdict.flags.begin() + static_cast<std::ptrdiff_t>(key.aliased.size()));
  out.uncovered.clear();
  if (key.uncovered.empty()) return Status::ok();
  detail::WordRange range;
  const std::vector<std::int64_t> words(key.uncovered.begin(), key.uncovered.end());
  const std::uint64_t beforeRanges = reduction.collectives();
  agreed = detail::agreeOnRange(words, min, range);
  stats.agreements += reduction.collectives() - beforeRanges;
  CHIMERA_RETURN_IF_ERROR(agreed);
  out.uncovered.resize(words.size());
  std::transform(range.high.begin(), range.high.end(), out.uncovered.begin(),
                 [](std::int64_t w) { return static_cast<std::uint8_t>(w != 0 ? 1 : 0); });
  return Status::ok();
}

// A MIN over a group is a MIN over each of its axes in turn, so a scope whose own
// communicator was not created is agreed axis by axis on the single-axis groups.
Status Session::Impl::agreementGroups(AxisSet scope, std::vector<AxisSet>& groups) {
  groups.clear();
  if (scope.empty()) return Status::ok();
  const Mesh& mesh = backend.mesh();
  if (!options.perRank || backend.hasGroup(scope)) {
    groups.push_back(scope);
  } else {
    for (int axis = 0; axis < mesh.numAxes(); ++axis) {
      if (!scope.contains(axis)) continue;
      const AxisSet single = AxisSet::fromBits(1u << axis);
      CHIMERA_CHECK_ARG(backend.hasGroup(single),
                        "per-rank recording agrees on a window within group {}, whose communicator (or that of {}) "
                        "was not created: call Backend::createGroups at setup",
                        mesh.axesName(scope), mesh.axis(axis).name);
      groups.push_back(single);
    }
  }
  return Status::ok();
}

AxisSet Session::Impl::agreementScope() const {
  const Mesh& mesh = backend.mesh();
  if (!options.perRank) return mesh.allAxes();
  std::uint32_t bits = 0;
  for (const detail::WindowValue& v : window.values) {
    for (int axis = 0; axis < mesh.numAxes(); ++axis) {
      if (mesh.axis(axis).size > 1 && !v.layout.placement(axis).isStage()) bits |= 1u << axis;
    }
  }
  return AxisSet::fromBits(bits);
}

// Turns every byte-range declaration into the layout the world agreed on.
void Session::Impl::resolveRanges(const std::vector<std::uint8_t>& uncovered) {
  std::size_t at = 0;
  for (std::size_t i = 0; i < window.values.size(); ++i) {
    detail::WindowValue& v = window.values[i];
    if (!v.declaredRange) continue;
    const std::vector<Layout> candidates = detail::rangeCandidates(v.layout, v.spec);
    v.declared = detail::chooseRangeLayout(candidates, v.spec, uncovered.data() + at);
    at += candidates.size();
    CHIMERA_LOG_DEBUG(kLog, "consume v{} bytes [{}, +{}) on rank {} of {}: read as {} (of {} candidate layouts)", i,
                      v.declaredRange->offset, v.declaredRange->bytes, backend.rank(), v.layout.toString(),
                      v.declared->toString(), candidates.size());
  }
}

// A direct call is made by the tensor's holders only (one pipeline stage). SPMD: every rank
// plans the window, so all create the group together (collective over the world). Per rank:
// the group must exist already.
Status Session::Impl::createGroup(AxisSet axes) {
  if (std::find(createdGroups.begin(), createdGroups.end(), axes.bits()) != createdGroups.end()) return Status::ok();
  if (options.perRank) {
    CHIMERA_CHECK_ARG(backend.hasGroup(axes),
                      "the communicator of group {} was not created on rank {}: call Backend::createGroups with "
                      "every group the job uses at setup",
                      backend.mesh().axesName(axes), backend.rank());
  } else {
    const AxisSet groups[] = {axes};
    CHIMERA_RETURN_IF_ERROR(backend.createGroups(groups));
  }
  createdGroups.push_back(axes.bits());
  return Status::ok();
}

Status Session::Impl::completeHandOffs(std::vector<detail::WindowStep>& steps, const std::vector<std::uint8_t>& aliased,
                                       const Status& local) {
  const Mesh& mesh = backend.mesh();
  const int rank = backend.rank();
  std::vector<int> readers(window.values.size(), 0);
  for (const detail::WindowCall& c : window.calls) ++readers[c.input];
  // The receiving steps, each placed before the first step recorded after it. A received value
  // that passes into one declared chain (no send in it) takes that chain along as its tail.
  for (const detail::WindowReceive& r : window.receives) {
    detail::WindowStep step;
    step.handOff = detail::WindowStep::HandOff::Receive;
    step.input = r.value;
    step.output = r.value;
    const detail::WindowValue& v = window.values[r.value];
    const int axis = std::countr_zero(r.axis.bits());
    step.peer = detail::handOffPeer(mesh, rank, r.axis, v.layout.placement(axis).stage - r.stageStep);
    step.declared = options.fusion && v.declared && readers[r.value] == 0 && aliased[r.value] == 0;
    if (options.fusion && readers[r.value] == 1 && !v.declared && aliased[r.value] == 0) {
      const auto next = std::find_if(steps.begin(), steps.end(), [&](const detail::WindowStep& s) {
        return s.handOff == detail::WindowStep::HandOff::None && s.kind == detail::WindowStep::Kind::Chain &&
               s.input == r.value && s.declared &&
               std::none_of(s.request.chain.ops.begin(), s.request.chain.ops.end(),
                            [](const ChainOp& op) { return op.kind == ChainOp::Kind::Send; });
      });
      if (next != steps.end()) {
        step.output = next->output;
        step.tail = next->calls;
        step.request.chain = next->request.chain;  // the tail, until the exchange completes it
        step.request.consume = next->request.consume;
        step.declared = true;
        steps.erase(next);
      }
    }
    step.calls = {static_cast<int>(r.position)};
    const auto at = std::find_if(steps.begin(), steps.end(), [&](const detail::WindowStep& s) {
      return s.handOff != detail::WindowStep::HandOff::Receive && s.calls.front() >= static_cast<int>(r.position);
    });
    steps.insert(at, std::move(step));
  }
  std::vector<detail::HandOffSide> sides;
  std::vector<std::size_t> sideSteps;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    detail::WindowStep& step = steps[i];
    detail::HandOffSide side;
    if (step.handOff == detail::WindowStep::HandOff::Receive) {
      const detail::WindowValue& v = window.values[step.input];
      const detail::WindowReceive& r =
          *std::find_if(window.receives.begin(), window.receives.end(),
                        [&](const detail::WindowReceive& x) { return x.value == step.input; });
      side.sending = false;
      side.stageStep = r.stageStep;
      side.spec = v.spec;
      side.received = v.layout;
      side.tail = step.request.chain;
      if (step.declared) side.consume = step.request.chain.ops.empty() ? v.declared : step.request.consume;
    } else if (step.kind == detail::WindowStep::Kind::Chain &&
               step.request.chain.ops.back().kind == ChainOp::Kind::Send) {
      const detail::WindowValue& v = window.values[step.output];
      const ChainOp& send = step.request.chain.ops.back();
      step.handOff = detail::WindowStep::HandOff::Send;
      step.peer =
          detail::handOffPeer(mesh, rank, send.axes, v.layout.placement(std::countr_zero(send.axes.bits())).stage);
      side.sending = true;
      side.stageStep = send.stageStep;
      side.spec = step.request.spec;
      side.received = v.layout;
      side.request = step.request;
      side.request.consume.reset();
    } else {
      continue;
    }
    side.peer = step.peer;
    sides.push_back(std::move(side));
    sideSteps.push_back(i);
  }
  if (sides.empty()) return local;
  CHIMERA_RETURN_IF_ERROR(
      detail::exchangeHandOffs(backend, handOffs, sides, options.fusion, local, options.stream, stats.agreements));
  for (std::size_t k = 0; k < sides.size(); ++k) {
    detail::WindowStep& step = steps[sideSteps[k]];
    step.request = sides[k].request;
    step.declared = step.request.consume.has_value();
  }
  // Hand-offs run forward-flowing first, then backward-flowing, each kind in record order:
  // both ends of a pair then meet in the same order whatever order each recorded them in
  // (a stage's send_forward_recv_backward against its neighbour's send_backward_recv_forward).
  // Not when a hand-off sends what this window received: that order is the data's.
  std::vector<std::uint8_t> derived(window.values.size(), 0);
  for (const detail::WindowReceive& r : window.receives) derived[r.value] = 1;
  for (const detail::WindowCall& c : window.calls) derived[c.output] = derived[c.input];
  bool reorder = true;
  for (const detail::WindowStep& step : steps) {
    if (step.handOff == detail::WindowStep::HandOff::Send && derived[step.input] != 0) reorder = false;
  }
  if (!reorder) return Status::ok();
  std::vector<std::size_t> slots;
  std::vector<detail::WindowStep> handOffSteps;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].handOff == detail::WindowStep::HandOff::None) continue;
    slots.push_back(i);
    handOffSteps.push_back(std::move(steps[i]));
  }
  const auto flow = [&](const detail::WindowStep& s) {
    const auto send = std::find_if(s.request.chain.ops.begin(), s.request.chain.ops.end(),
                                   [](const ChainOp& op) { return op.kind == ChainOp::Kind::Send; });
    return send != s.request.chain.ops.end() && send->stageStep > 0 ? 0 : 1;
  };
  std::stable_sort(handOffSteps.begin(), handOffSteps.end(),
                   [&](const detail::WindowStep& a, const detail::WindowStep& b) { return flow(a) < flow(b); });
  for (std::size_t k = 0; k < slots.size(); ++k) steps[slots[k]] = std::move(handOffSteps[k]);
  return Status::ok();
}

Status Session::Impl::planWindow(detail::CachedWindow& out) {
  resolveRanges(out.agreedUncovered);
  std::vector<detail::WindowStep> steps = detail::analyseWindow(window, out.agreedAliased, options.fusion);
  if (options.perRank) CHIMERA_RETURN_IF_ERROR(completeHandOffs(steps, out.agreedAliased, Status::ok()));
  out.steps.clear();
  out.fused.clear();
  out.bytesAsRecorded = 0;
  out.bytesSent = 0;
  out.rankBytesAsRecorded = 0;
  out.rankBytesSent = 0;
  for (detail::WindowStep& step : steps) {
    const ChainPlan* plan = nullptr;
    CHIMERA_RETURN_IF_ERROR(planStep(step, plan));
    // The plan chosen for this chain is the chain as issued: run its calls as recorded, on the
    // caller's buffers (no plan buffers, no copy to the consumed layout), as fusion off does.
    // A hand-off's two ends take the planner's decision as it is: both must run the same program.
    const bool runsAsIssued =
        options.fusion && step.kind == detail::WindowStep::Kind::Chain &&
        (step.calls.size() > 1 || step.declared || !step.tail.empty()) &&
        (!plan->useFused || (step.handOff == detail::WindowStep::HandOff::None && !fusionPays(step, *plan)));
    if (!runsAsIssued) {
      CHIMERA_RETURN_IF_ERROR(addStep(std::move(step), *plan, out));
      continue;
    }
    for (detail::WindowStep& piece : recordedCalls(step, *plan)) {
      CHIMERA_RETURN_IF_ERROR(planStep(piece, plan));
      CHIMERA_RETURN_IF_ERROR(addStep(std::move(piece), *plan, out));
    }
  }
  return Status::ok();
}

Status Session::Impl::planStep(const detail::WindowStep& step, const ChainPlan*& plan) {
  CHIMERA_RETURN_IF_ERROR(options.perRank ? executor.planAgreed(step.request, plan)
                                          : executor.plan(step.request, plan));
  if (step.kind != detail::WindowStep::Kind::Chain)
    CHIMERA_RETURN_IF_ERROR(createGroup(step.request.chain.ops[0].axes));
  return Status::ok();
}

// The calls `step` covers, each a step of its own run as issued. A hand-off keeps its pairing:
// its send (on the sending stage) and its receive (on the receiving one) become the two ends of
// the chain of one `send`, from the layout the sender's calls give the tensor, which both
// sides plan alike; the receiver's calls on the received value follow it.
std::vector<detail::WindowStep> Session::Impl::recordedCalls(const detail::WindowStep& step, const ChainPlan& plan) {
  std::vector<detail::WindowStep> pieces;
  const auto add = [&](int call) {
    detail::WindowStep piece = detail::singleStep(window, call, false);
    piece.asRecorded = piece.kind == detail::WindowStep::Kind::Chain;
    if (step.handOff == detail::WindowStep::HandOff::Send && piece.request.chain.ops[0].kind == ChainOp::Kind::Send) {
      piece.handOff = step.handOff;
      piece.peer = step.peer;
    }
    pieces.push_back(std::move(piece));
  };
  if (step.handOff != detail::WindowStep::HandOff::Receive) {
    for (const int call : step.calls) add(call);
    return pieces;
  }
  const std::vector<ChainOp>& ops = step.request.chain.ops;
  const auto send = static_cast<std::size_t>(
      std::find_if(ops.begin(), ops.end(), [](const ChainOp& op) { return op.kind == ChainOp::Kind::Send; }) -
      ops.begin());
  detail::WindowStep receive;
  receive.handOff = step.handOff;
  receive.peer = step.peer;
  receive.calls = step.calls;
  receive.input = receive.output = step.input;
  receive.asRecorded = true;
  receive.request.spec = step.request.spec;
  receive.request.from = plan.trace.layouts[send];
  receive.request.chain.ops = {ops[send]};
  pieces.push_back(std::move(receive));
  for (const int call : step.tail) add(call);
  return pieces;
}

// Where the consumed part of a chain step goes (WindowStep::placedAt): straight into the
// output buffer when its box there is one contiguous stretch and, when the output shares the
// input's storage (a chain of in-place calls), the plan is a single step that may write over
// its input (an AllReduce in place, a ReduceScatter into the member's own block, a copy onto
// itself); else through the staging buffer. The verdict depends on the layouts and the
// recorded calls only, so every rank of a group (and both sides of a hand-off) reach the same.
std::int64_t Session::Impl::placement(const detail::WindowStep& step, const ChainPlan& plan) const {
  const detail::WindowValue& in = window.values[step.input];
  const detail::WindowValue& out = window.values[step.output];
  const Layout& consumed = step.request.consume ? *step.request.consume : out.layout;
  const bool shared = step.handOff != detail::WindowStep::HandOff::Receive && in.storage == out.storage;
  if (!shared && consumed == out.layout) return 0;
  const std::vector<int> holders = consumed.holders();
  if (holders.empty()) return 0;
  const TensorSpec& spec = out.spec;
  const std::size_t elementSize = dataTypeSize(spec.dtype);
  const auto offsetOn = [&](int rank) -> std::int64_t {
    const Box box = consumed.rankBox(rank, spec).relativeTo(out.layout.rankBox(rank, spec).offset);
    std::size_t offset = 0;
    bool contiguous = false;
    if (!detail::contiguousOffset(out.layout.localShape(spec), box, elementSize, offset, contiguous).isOk() ||
        !contiguous) {
      return -1;
    }
    const auto placed = static_cast<std::int64_t>(offset);
    if (!shared) return placed;
    const Plan& p = plan.chosen();
    if (p.steps.size() != 1 || p.steps[0].input != Plan::kInput || p.steps[0].output != Plan::kOutput) return -1;
    const PlanStep& only = p.steps[0];
    const std::vector<std::int64_t> whole = p.buffers[Plan::kInput].layout.localShape(spec);
    switch (only.kind) {
      case PlanStep::Kind::AllReduce: return offset == 0 ? placed : -1;
      case PlanStep::Kind::ReduceScatter: {
        const auto member = static_cast<std::size_t>(backend.mesh().groupIndex(rank, only.axes));
        const auto block = static_cast<std::size_t>(consumed.localBytes(spec));
        return detail::blocksContiguous(whole, only.dim) && offset == member * block ? placed : -1;
      }
      case PlanStep::Kind::LocalCopy: {
        std::size_t from = 0;
        bool runs = false;
        const Status status = detail::contiguousOffset(whole, p.localCopySource(only, rank), elementSize, from, runs);
        return status.isOk() && runs && from == offset ? placed : -1;
      }
      default: break;
    }
    return -1;
  };
  if (offsetOn(holders.front()) < 0) return -1;
  return consumed.holds(backend.rank()) ? offsetOn(backend.rank()) : 0;
}

// The fused plan as this Session runs it (with the staging copy when the consumed part cannot
// be written in place) against the calls as recorded (the chain as written without its copy
// to the consumed layout: the consumer reads the recorded result where it lies). Fused only
// when predicted cheaper beyond the cost's margin (chimera::fusionPays).
bool Session::Impl::fusionPays(const detail::WindowStep& step, const ChainPlan& plan) const {
  Plan fused = plan.fused;
  if (placement(step, plan) < 0) {
    PlanStep stage;
    stage.kind = PlanStep::Kind::LocalCopy;
    stage.input = Plan::kOutput;
    stage.output = Plan::kOutput;
    stage.origin = "the Session stages the consumed part";
    fused.steps.push_back(stage);
  }
  Plan recorded = plan.baseline;
  if (!(plan.trace.final() == plan.consumed)) recorded.steps.pop_back();
  return chimera::fusionPays(fused, recorded, *cost);
}

Status Session::Impl::addStep(detail::WindowStep step, const ChainPlan& plan, detail::CachedWindow& out) {
  const auto r = static_cast<std::size_t>(backend.rank());
  const bool fused =
      options.fusion && step.kind == detail::WindowStep::Kind::Chain && !step.asRecorded && plan.useFused;
  if (step.kind == detail::WindowStep::Kind::Chain && step.handOff != detail::WindowStep::HandOff::Send)
    step.placedAt = placement(step, plan);
  if (!options.perRank) {
    out.bytesAsRecorded += static_cast<std::uint64_t>(plan.baselineBytes.total);
    out.bytesSent += static_cast<std::uint64_t>((fused ? plan.fusedBytes : plan.baselineBytes).total);
  }
  out.rankBytesAsRecorded += static_cast<std::uint64_t>(plan.baselineBytes.perRank[r]);
  out.rankBytesSent += static_cast<std::uint64_t>((fused ? plan.fusedBytes : plan.baselineBytes).perRank[r]);
  if (fused) {
    std::string rewrites;
    for (const std::string& name : plan.rewrites) rewrites += (rewrites.empty() ? "" : ", ") + name;
    CHIMERA_LOG_DEBUG(
        kLog, "rewrite {} from {} consumed as {}: [{}]; bytes this rank {} -> {}, all ranks {} -> {} (saves {})",
        step.request.chain.toString(backend.mesh()), step.request.from.toString(), plan.consumed.toString(), rewrites,
        plan.baselineBytes.perRank[r], plan.fusedBytes.perRank[r], plan.baselineBytes.total, plan.fusedBytes.total,
        plan.baselineBytes.total - plan.fusedBytes.total);
  }
  out.steps.push_back(std::move(step));
  out.fused.push_back(fused ? 1 : 0);
  return Status::ok();
}

Status Session::Impl::lookup(const detail::WindowKey& key, detail::CachedWindow*& out) {
  auto [first, last] = cache.equal_range(key.hash);
  for (auto it = first; it != last; ++it) {
    if (!(it->second->key == key)) continue;
    out = it->second.get();
    ++stats.windowCacheHits;
    if (!options.checkEveryWindow) return Status::ok();
    Verdicts verdicts;
    CHIMERA_RETURN_IF_ERROR(agreeOrRelease(key, verdicts));
    // Per rank, the hand-off peers check too: the exchange runs again (a peer's declaration
    // may have changed; the Executor's plans stay cached).
    if (options.perRank && !window.receives.empty()) return planWindow(*out);
    if (options.perRank) {
      for (const detail::WindowCall& c : window.calls) {
        if (c.op.kind == ChainOp::Kind::Send) return planWindow(*out);
      }
    }
    if (verdicts.aliased == out->agreedAliased && verdicts.uncovered == out->agreedUncovered) return Status::ok();
    // Another rank's aliasing or byte range changed: re-derive the steps.
    out->agreedAliased = std::move(verdicts.aliased);
    out->agreedUncovered = std::move(verdicts.uncovered);
    return planWindow(*out);
  }
  auto entry = std::make_unique<detail::CachedWindow>();
  entry->key = key;
  Verdicts verdicts;
  CHIMERA_RETURN_IF_ERROR(agreeOrRelease(key, verdicts));
  entry->agreedAliased = std::move(verdicts.aliased);
  entry->agreedUncovered = std::move(verdicts.uncovered);
  CHIMERA_RETURN_IF_ERROR(planWindow(*entry));
  CHIMERA_LOG_DEBUG(kLog, "planned window {}: {} steps", detail::windowText(window), entry->steps.size());
  out = entry.get();
  cache.emplace(key.hash, std::move(entry));
  return Status::ok();
}

// Agrees on the window; per rank, a failed agreement still meets the hand-off peers (with a
// failure flag) so that they return Mismatch instead of waiting in the exchange.
Status Session::Impl::agreeOrRelease(const detail::WindowKey& key, Verdicts& verdicts) {
  const Status agreed = agree(key, Status::ok(), verdicts);
  if (agreed.isOk() || !options.perRank) return agreed;
  std::vector<detail::WindowStep> steps = detail::analyseWindow(window, key.aliased, options.fusion);
  (void)completeHandOffs(steps, key.aliased, agreed);
  return agreed;
}

// The consumed part lands in the final buffer where the recorded calls would have put it.
Status Session::Impl::runStaged(const detail::WindowStep& step, const TensorSpec& spec, const void* input,
                                std::size_t inputBytes, detail::WindowValue& out) {
  const int rank = backend.rank();
  const Layout& consumed = step.request.consume ? *step.request.consume : out.layout;
  const bool holds = consumed.holds(rank);
  const auto bytes = holds ? static_cast<std::size_t>(consumed.localBytes(spec)) : 0;
  if (bytes > 0) CHIMERA_RETURN_IF_ERROR(staging.reserve(bytes));
  const ChainMode mode = options.fusion ? ChainMode::Planned : ChainMode::Baseline;
  CHIMERA_RETURN_IF_ERROR(executor.runChain(step.request, mode, input, inputBytes, bytes > 0 ? staging.data() : nullptr,
                                            bytes, options.stream));
  if (bytes == 0) return Status::ok();
  ++stats.localCopies;
  stats.localCopyBytes += bytes;
  const Box finalBox = out.layout.rankBox(rank, spec);
  const Box box = consumed.rankBox(rank, spec).relativeTo(finalBox.offset);
  const std::vector<std::int64_t> shape = out.layout.localShape(spec);
  if (box.volume() * static_cast<std::int64_t>(dataTypeSize(spec.dtype)) == out.layout.localBytes(spec)) {
    return backend.copy(out.buffer, staging.data(), bytes, options.stream);
  }
  return backend.unpackBox(staging.data(), out.buffer, shape, box, spec.dtype, options.stream);
}

Status Session::Impl::runStep(const detail::WindowStep& step, bool fused) {
  const int rank = backend.rank();
  const detail::WindowValue& in = window.values[step.input];
  detail::WindowValue& out = window.values[step.output];
  const ChainMode mode = options.fusion && !step.asRecorded ? ChainMode::Planned : ChainMode::Baseline;
  if (step.handOff == detail::WindowStep::HandOff::Receive) {
    ++stats.chainsRun;
    if (fused) ++stats.fusedChains;
    if (step.placedAt < 0) return runStaged(step, out.spec, nullptr, 0, out);
    return runPlaced(step, mode, nullptr, 0, out);
  }
  const ChainOp& op = step.request.chain.ops.front();
  const auto count = static_cast<std::size_t>(in.layout.localBytes(in.spec)) / dataTypeSize(in.spec.dtype);
  switch (step.kind) {
    case detail::WindowStep::Kind::DirectAllReduce:
      if (!in.layout.holds(rank)) return Status::ok();
      return backend.allReduce(in.buffer, in.buffer, count, in.spec.dtype, in.layout.partialOp(), op.axes,
                               options.stream);
    case detail::WindowStep::Kind::DirectBroadcast:
      if (!in.layout.holds(rank)) return Status::ok();
      return backend.broadcast(in.buffer, in.buffer, count, in.spec.dtype, op.root, op.axes, options.stream);
    case detail::WindowStep::Kind::Chain: break;
  }
  ++stats.chainsRun;
  if (fused) ++stats.fusedChains;
  if (step.placedAt < 0) return runStaged(step, in.spec, in.buffer, in.bytes, out);
  return runPlaced(step, mode, in.buffer, in.bytes, out);
}

// The chain's plan writes the consumed part (all of the output, without a declaration)
// straight at its place in the output buffer.
Status Session::Impl::runPlaced(const detail::WindowStep& step, ChainMode mode, const void* input,
                                std::size_t inputBytes, detail::WindowValue& out) {
  if (step.placedAt == 0 && (!step.request.consume || *step.request.consume == out.layout)) {
    return executor.runChain(step.request, mode, input, inputBytes, out.buffer, out.bytes, options.stream);
  }
  const Layout& consumed = *step.request.consume;
  const auto bytes =
      consumed.holds(backend.rank()) ? static_cast<std::size_t>(consumed.localBytes(out.spec)) : std::size_t{0};
  void* at = bytes > 0 ? static_cast<std::byte*>(out.buffer) + step.placedAt : nullptr;
  return executor.runChain(step.request, mode, input, inputBytes, at, bytes, options.stream);
}

Status Session::Impl::flush() {
  Status status = Status::ok();
  if (!window.calls.empty() || !window.receives.empty()) {
    const detail::WindowKey key = detail::windowKey(window, backend.rank());
    detail::CachedWindow* entry = nullptr;
    status = lookup(key, entry);
    const std::uint64_t copies = executor.localCopies();
    const std::uint64_t copyBytes = executor.localCopyBytes();
    for (std::size_t i = 0; status.isOk() && i < entry->steps.size(); ++i) {
      const detail::WindowStep& step = entry->steps[i];
      if (step.kind != detail::WindowStep::Kind::Chain) ++stats.chainsRun;
      const std::uint64_t calls = detail::groupedCallsIssued();
      status = runStep(step, entry->fused[i] != 0);
      if (status.isOk() || !options.perRank) continue;
      if (step.handOff != detail::WindowStep::HandOff::None) {
        status = Status(status.code(), fmt::format("hand-off {} rank {}: {}",
                                                   step.handOff == detail::WindowStep::HandOff::Send ? "to" : "from",
                                                   step.peer, status.message()));
      }
      releasePeers(entry->steps, i, detail::groupedCallsIssued() != calls, status);
    }
    stats.localCopies += executor.localCopies() - copies;
    stats.localCopyBytes += executor.localCopyBytes() - copyBytes;
    if (status.isOk()) {
      ++stats.windows;
      stats.bytesAsRecorded += entry->bytesAsRecorded;
      stats.bytesSent += entry->bytesSent;
      stats.rankBytesAsRecorded += entry->rankBytesAsRecorded;
      stats.rankBytesSent += entry->rankBytesSent;
    }
  }
  startWindow();
  return status;
}

// The hand-off peers of a window that failed at step `failed` may wait in transfers they share
// with this rank: each hand-off from there on that this rank has not met gets a failure
// message, so the peer returns Mismatch instead of waiting. The failed step met its peer when
// its point-to-point call was reached (`metPeer`): the peer then failed (or completed) with it.
void Session::Impl::releasePeers(const std::vector<detail::WindowStep>& steps, std::size_t failed, bool metPeer,
                                 const Status& failure) {
  std::vector<int> peers;
  for (std::size_t j = failed; j < steps.size(); ++j) {
    if (steps[j].handOff == detail::WindowStep::HandOff::None || (j == failed && metPeer)) continue;
    peers.push_back(steps[j].peer);
  }
  detail::releaseHandOffPeers(backend, handOffs, peers, options.fusion, failure, options.stream);
}

// A consume whose declaration failed on this rank still meets the other ranks' agreement
// (with the failure flag), so ranks planning the window return Mismatch instead of waiting.
Status Session::Impl::abandon(const Status& reason) {
  if (!window.calls.empty() || !window.receives.empty()) {
    Verdicts ignored;
    const detail::WindowKey key = detail::windowKey(window, backend.rank());
    (void)agree(key, reason, ignored);
    if (options.perRank) {
      std::vector<detail::WindowStep> steps = detail::analyseWindow(window, key.aliased, options.fusion);
      (void)completeHandOffs(steps, key.aliased, reason);
    }
  }
  startWindow();
  return reason;
}

// Drops the recorded window; its handles expire.
void Session::Impl::startWindow() {
  window.values.clear();
  window.calls.clear();
  window.receives.clear();
  window.storages = 0;
  ++windowId;
}

}  // namespace chimera
