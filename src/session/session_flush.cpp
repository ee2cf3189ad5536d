// SPDX-License-Identifier: Apache-2.0
// Flushing a window: look its plan up (or plan it, agreeing over the world), then run it.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "common/check.hpp"
#include "common/log.hpp"
#include "session/session_impl.hpp"

namespace chimera {
namespace {

constexpr const char* kLog = "session";
constexpr std::size_t kAgreementWords = 3 + Session::kMaxWindowValues;

bool overlapping(const detail::WindowValue& a, const detail::WindowValue& b) {
  if (a.buffer == nullptr || b.buffer == nullptr || a.bytes == 0 || b.bytes == 0) return false;
  const auto* a0 = static_cast<const std::byte*>(a.buffer);
  const auto* b0 = static_cast<const std::byte*>(b.buffer);
  return a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

}  // namespace

// One MAX allReduce over the world of {hash, -hash, failed, aliased per value} (a fixed size,
// so ranks with different windows still meet): equal hashes prove every rank recorded the
// same window; the aliasing verdicts are OR-ed, so every rank materialises a value aliased on
// any rank. A window with byte-range declarations then OR-s the flags of their candidate
// layouts (equal windows have equal candidate lists), so every rank resolves a range to a
// layout that holds every rank's range.
Status Session::Impl::agree(const detail::WindowKey& key, const Status& local, Verdicts& out) {
  const std::size_t count = std::max(kAgreementWords, key.uncovered.size());
  CHIMERA_RETURN_IF_ERROR(agreement.reserve(count * sizeof(std::int64_t)));
  std::vector<std::int64_t>& words = agreementWords;
  words.assign(kAgreementWords, 0);
  words[0] = key.sharedHash;
  words[1] = -key.sharedHash;
  words[2] = local.isOk() ? 0 : 1;
  std::copy(key.aliased.begin(), key.aliased.end(), words.begin() + 3);
  CHIMERA_RETURN_IF_ERROR(allReduceMax(words));
  if (!local.isOk()) return local;
  if (words[2] != 0) return Status::mismatch("another rank failed to prepare the window this rank flushed");
  if (words[0] != -words[1]) {
    return Status::mismatch(fmt::format(
        "ranks recorded different windows (calls or consume declarations differ): this rank has {} (hash {:#x}), "
        "the world's hashes range over [{:#x}, {:#x}]",
        detail::windowText(window), key.sharedHash, -words[1], words[0]));
  }
  const auto flag = [](std::int64_t w) { return static_cast<std::uint8_t>(w != 0 ? 1 : 0); };
  out.aliased.resize(key.aliased.size());
  std::transform(words.begin() + 3, words.begin() + 3 + static_cast<std::ptrdiff_t>(key.aliased.size()),
                 out.aliased.begin(), flag);
  out.uncovered.clear();
  if (key.uncovered.empty()) return Status::ok();
  words.assign(key.uncovered.begin(), key.uncovered.end());
  CHIMERA_RETURN_IF_ERROR(allReduceMax(words));
  out.uncovered.resize(words.size());
  std::transform(words.begin(), words.end(), out.uncovered.begin(), flag);
  return Status::ok();
}

Status Session::Impl::allReduceMax(std::vector<std::int64_t>& words) {
  const std::size_t bytes = words.size() * sizeof(std::int64_t);
  CHIMERA_RETURN_IF_ERROR(backend.copy(agreement.data(), words.data(), bytes));
  CHIMERA_RETURN_IF_ERROR(backend.allReduce(agreement.data(), agreement.data(), words.size(), DataType::I64,
                                            ReduceOp::Max, backend.mesh().allAxes()));
  CHIMERA_RETURN_IF_ERROR(backend.copy(words.data(), agreement.data(), bytes));
  return backend.synchronize();
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

// A backend creates a group's communicator on first use, collectively over the world; a
// direct call is made by the tensor's holders only (one pipeline stage), so every rank first
// joins a one-element allReduce on the group (the agreement buffer exists by now).
Status Session::Impl::createGroup(AxisSet axes) {
  if (std::find(createdGroups.begin(), createdGroups.end(), axes.bits()) != createdGroups.end()) return Status::ok();
  CHIMERA_RETURN_IF_ERROR(backend.allReduce(agreement.data(), agreement.data(), 1, DataType::I64, ReduceOp::Max, axes));
  createdGroups.push_back(axes.bits());
  return Status::ok();
}

Status Session::Impl::planWindow(detail::CachedWindow& out) {
  const int rank = backend.rank();
  resolveRanges(out.agreedUncovered);
  out.steps = detail::analyseWindow(window, out.agreedAliased, options.fusion);
  out.fused.assign(out.steps.size(), 0);
  out.bytesAsRecorded = 0;
  out.bytesSent = 0;
  for (std::size_t i = 0; i < out.steps.size(); ++i) {
    const detail::WindowStep& step = out.steps[i];
    const ChainPlan* plan = nullptr;
    CHIMERA_RETURN_IF_ERROR(executor.plan(step.request, plan));
    if (step.kind != detail::WindowStep::Kind::Chain) CHIMERA_RETURN_IF_ERROR(createGroup(step.request.chain.ops[0].axes));
    const bool fused = options.fusion && step.kind == detail::WindowStep::Kind::Chain && plan->useFused;
    out.fused[i] = fused ? 1 : 0;
    const auto r = static_cast<std::size_t>(rank);
    out.bytesAsRecorded += static_cast<std::uint64_t>(plan->baselineBytes.total);
    out.bytesSent += static_cast<std::uint64_t>((fused ? plan->fusedBytes : plan->baselineBytes).total);
    if (fused) {
      std::string rewrites;
      for (const std::string& name : plan->rewrites) rewrites += (rewrites.empty() ? "" : ", ") + name;
      CHIMERA_LOG_DEBUG(kLog, "rewrite {} from {} consumed as {}: [{}]; bytes this rank {} -> {}, all ranks {} -> {} (saves {})",
                        step.request.chain.toString(backend.mesh()), step.request.from.toString(),
                        plan->consumed.toString(), rewrites, plan->baselineBytes.perRank[r],
                        plan->fusedBytes.perRank[r], plan->baselineBytes.total, plan->fusedBytes.total,
                        plan->baselineBytes.total - plan->fusedBytes.total);
    }
  }
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
    CHIMERA_RETURN_IF_ERROR(agree(key, Status::ok(), verdicts));
    if (verdicts.aliased == out->agreedAliased && verdicts.uncovered == out->agreedUncovered) return Status::ok();
    // Another rank's aliasing or byte range changed: re-derive the steps.
    out->agreedAliased = std::move(verdicts.aliased);
    out->agreedUncovered = std::move(verdicts.uncovered);
    return planWindow(*out);
  }
  auto entry = std::make_unique<detail::CachedWindow>();
  entry->key = key;
  Verdicts verdicts;
  CHIMERA_RETURN_IF_ERROR(agree(key, Status::ok(), verdicts));
  entry->agreedAliased = std::move(verdicts.aliased);
  entry->agreedUncovered = std::move(verdicts.uncovered);
  CHIMERA_RETURN_IF_ERROR(planWindow(*entry));
  CHIMERA_LOG_DEBUG(kLog, "planned window {}: {} steps", detail::windowText(window), entry->steps.size());
  out = entry.get();
  cache.emplace(key.hash, std::move(entry));
  return Status::ok();
}

// The consumed part lands in the final buffer where the recorded calls would have put it.
Status Session::Impl::runStaged(const detail::WindowStep& step, const detail::WindowValue& in,
                                detail::WindowValue& out) {
  const int rank = backend.rank();
  const Layout& consumed = step.request.consume ? *step.request.consume : out.layout;
  const TensorSpec& spec = in.spec;
  const bool holds = consumed.holds(rank);
  const auto bytes = holds ? static_cast<std::size_t>(consumed.localBytes(spec)) : 0;
  if (bytes > 0) CHIMERA_RETURN_IF_ERROR(staging.reserve(bytes));
  const ChainMode mode = options.fusion ? ChainMode::Planned : ChainMode::Baseline;
  CHIMERA_RETURN_IF_ERROR(
      executor.runChain(step.request, mode, in.buffer, in.bytes, bytes > 0 ? staging.data() : nullptr, bytes));
  if (bytes == 0) return Status::ok();
  const Box finalBox = out.layout.rankBox(rank, spec);
  const Box box = consumed.rankBox(rank, spec).relativeTo(finalBox.offset);
  const std::vector<std::int64_t> shape = out.layout.localShape(spec);
  if (box.volume() * static_cast<std::int64_t>(dataTypeSize(spec.dtype)) == out.layout.localBytes(spec)) {
    return backend.copy(out.buffer, staging.data(), bytes);
  }
  return backend.unpackBox(staging.data(), out.buffer, shape, box, spec.dtype);
}

Status Session::Impl::runStep(const detail::WindowStep& step, bool fused) {
  const int rank = backend.rank();
  const detail::WindowValue& in = window.values[step.input];
  detail::WindowValue& out = window.values[step.output];
  const ChainOp& op = step.request.chain.ops.front();
  const auto count = static_cast<std::size_t>(in.layout.localBytes(in.spec)) / dataTypeSize(in.spec.dtype);
  switch (step.kind) {
    case detail::WindowStep::Kind::DirectAllReduce:
      if (!in.layout.holds(rank)) return Status::ok();
      return backend.allReduce(in.buffer, in.buffer, count, in.spec.dtype, in.layout.partialOp(), op.axes);
    case detail::WindowStep::Kind::DirectBroadcast:
      if (!in.layout.holds(rank)) return Status::ok();
      return backend.broadcast(in.buffer, in.buffer, count, in.spec.dtype, op.root, op.axes);
    case detail::WindowStep::Kind::Chain:
      break;
  }
  ++stats.chainsRun;
  if (fused) ++stats.fusedChains;
  const bool reshaped = step.request.consume && !(*step.request.consume == out.layout);
  if (reshaped || overlapping(in, out)) return runStaged(step, in, out);
  const ChainMode mode = options.fusion ? ChainMode::Planned : ChainMode::Baseline;
  return executor.runChain(step.request, mode, in.buffer, in.bytes, out.buffer, out.bytes);
}

Status Session::Impl::flush() {
  Status status = Status::ok();
  if (!window.calls.empty()) {
    const detail::WindowKey key = detail::windowKey(window, backend.rank());
    detail::CachedWindow* entry = nullptr;
    status = lookup(key, entry);
    for (std::size_t i = 0; status.isOk() && i < entry->steps.size(); ++i) {
      if (entry->steps[i].kind != detail::WindowStep::Kind::Chain) ++stats.chainsRun;
      status = runStep(entry->steps[i], entry->fused[i] != 0);
    }
    if (status.isOk()) {
      ++stats.windows;
      stats.bytesAsRecorded += entry->bytesAsRecorded;
      stats.bytesSent += entry->bytesSent;
    }
  }
  startWindow();
  return status;
}

// A consume whose declaration failed on this rank still meets the other ranks' agreement
// (with the failure flag), so ranks planning the window return Mismatch instead of waiting.
Status Session::Impl::abandon(const Status& reason) {
  if (!window.calls.empty()) {
    Verdicts ignored;
    (void)agree(detail::windowKey(window, backend.rank()), reason, ignored);
  }
  startWindow();
  return reason;
}

// Drops the recorded window; its handles expire.
void Session::Impl::startWindow() {
  window.values.clear();
  window.calls.clear();
  window.storages = 0;
  ++windowId;
}

}  // namespace chimera
