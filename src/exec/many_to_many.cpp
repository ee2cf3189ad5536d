// SPDX-License-Identifier: Apache-2.0
// This rank's part of a ManyToMany step: every send and receive in one grouped call,
// contiguous boxes straight from/into the plan buffers, the others moved as boxes where the
// backend reads them from the sender's memory (Backend::movesBoxes) or else packed into and
// unpacked from staging, and transfers to itself as local box copies.
#include <fmt/format.h>

#include <algorithm>

#include "core/check.hpp"
#include "exec/box_blocks.hpp"
#include "exec/prepared_plan.hpp"

namespace chimera::detail {
namespace {

// A packed box as a tensor of its own extents, which it fills.
P2PRef packedRef(P2POp::Kind kind, SlotRef staged, std::size_t count, int peer, const Box& box) {
  return {kind, staged, count, peer, Box{std::vector<std::int64_t>(box.extent.size(), 0), box.extent}, box.extent};
}

}  // namespace

Status PreparedPlan::prepareManyToMany(const Plan& plan, const PlanStep& step, PreparedStep& out) {
  CHIMERA_CHECK_ARG(step.input != step.output, "many-to-many in place (buffer {})", step.input);
  const auto& inShape = shapes_[static_cast<std::size_t>(step.input)];
  const auto& outShape = shapes_[static_cast<std::size_t>(step.output)];
  const Layout& from = plan.buffers[static_cast<std::size_t>(step.input)].layout;
  const Layout& to = plan.buffers[static_cast<std::size_t>(step.output)].layout;
  const int worldSize = backend_->mesh().size();
  std::size_t packed = 0;    // bytes used in staging 0 (send side)
  std::size_t unpacked = 0;  // bytes used in staging 1 (receive side)
  for (const BoxTransfer& t : step.transfers) {
    CHIMERA_CHECK_ARG(t.src >= 0 && t.src < worldSize && t.dst >= 0 && t.dst < worldSize,
                      "transfer {} -> {} outside the world of {}", t.src, t.dst, worldSize);
    if (t.src != rank_ && t.dst != rank_) continue;
    CHIMERA_CHECK_ARG(t.srcBox.extent == t.dstBox.extent, "transfer {} -> {}: boxes {} and {} differ in extent", t.src,
                      t.dst, t.srcBox.toString(), t.dstBox.toString());
    if (t.srcBox.empty()) continue;
    CHIMERA_CHECK_ARG(from.holds(t.src) && to.holds(t.dst),
                      "transfer {} -> {}: the source or destination holds no buffer", t.src, t.dst);
    const std::size_t bytes = static_cast<std::size_t>(t.srcBox.volume()) * elementSize_;
    const std::size_t count = bytes / elementSize_;
    std::size_t srcOffset = 0;
    std::size_t dstOffset = 0;
    bool srcContiguous = false;
    bool dstContiguous = false;
    // Both ends judge both boxes, on the holders' shapes, so that they agree on moving a box.
    const auto& srcShape = plan.buffers[static_cast<std::size_t>(step.input)].localShape;
    const auto& dstShape = plan.buffers[static_cast<std::size_t>(step.output)].localShape;
    std::size_t srcRun = 0;
    std::size_t dstRun = 0;
    CHIMERA_RETURN_IF_ERROR(contiguousOffset(srcShape, t.srcBox, elementSize_, srcOffset, srcContiguous, &srcRun));
    CHIMERA_RETURN_IF_ERROR(contiguousOffset(dstShape, t.dstBox, elementSize_, dstOffset, dstContiguous, &dstRun));
    const int peer = t.src == rank_ ? t.dst : t.src;
    const TransferPasses passes =
        transferPasses(static_cast<std::int64_t>(bytes), static_cast<std::int64_t>(srcRun),
                       static_cast<std::int64_t>(dstRun), peer != rank_ && backend_->movesBoxes(peer));
    if (passes.movedAsBox) {
      if (t.src == rank_ && passes.pack) {
        const SlotRef staged{stagingSlot(0), packed};
        out.before.push_back(packAction({step.input, 0}, staged, inShape, t.srcBox));
        out.p2p.push_back(packedRef(P2POp::Kind::Send, staged, count, peer, t.srcBox));
        packed = alignStaging(packed + bytes);
      } else if (t.src == rank_) {
        out.p2p.push_back({P2POp::Kind::Send, {step.input, 0}, count, peer, t.srcBox, srcShape});
      } else if (passes.unpack) {
        const SlotRef staged{stagingSlot(1), unpacked};
        out.p2p.push_back(packedRef(P2POp::Kind::Recv, staged, count, peer, t.dstBox));
        out.after.push_back(unpackAction(staged, {step.output, 0}, outShape, t.dstBox));
        unpacked = alignStaging(unpacked + bytes);
      } else {
        out.p2p.push_back({P2POp::Kind::Recv, {step.output, 0}, count, peer, t.dstBox, dstShape});
      }
      continue;
    }
    SlotRef source{step.input, srcOffset};
    const std::size_t packedBefore = packed;
    if (t.src == rank_ && !srcContiguous) {
      source = {stagingSlot(0), packed};
      out.before.push_back(packAction({step.input, 0}, source, inShape, t.srcBox));
      packed = alignStaging(packed + bytes);
    }
    if (t.src == rank_ && t.dst == rank_) {
      if (dstContiguous) {
        if (srcContiguous) {
          out.before.push_back(copyAction(source, {step.output, dstOffset}, bytes));
        } else {
          out.before.back().dst = {step.output, dstOffset};  // pack straight into the output
          packed = packedBefore;
        }
      } else {
        out.before.push_back(unpackAction(source, {step.output, 0}, outShape, t.dstBox));
      }
    } else if (t.src == rank_) {
      out.p2p.push_back({P2POp::Kind::Send, source, count, t.dst});
    } else if (dstContiguous) {
      out.p2p.push_back({P2POp::Kind::Recv, {step.output, dstOffset}, count, t.src});
    } else {
      const SlotRef staged{stagingSlot(1), unpacked};
      out.p2p.push_back({P2POp::Kind::Recv, staged, count, t.src});
      out.after.push_back(unpackAction(staged, {step.output, 0}, outShape, t.dstBox));
      unpacked = alignStaging(unpacked + bytes);
    }
  }
  // Packs first (they only read the input), then copies, then unpacks (which may read what a
  // pack staged): the packs of the step become one batched call (mergeBoxActions).
  const auto kindIs = [](LocalAction::Kind kind) { return [kind](const LocalAction& a) { return a.kind == kind; }; };
  const auto copies = std::stable_partition(out.before.begin(), out.before.end(), kindIs(LocalAction::Kind::Pack));
  std::stable_partition(copies, out.before.end(), kindIs(LocalAction::Kind::Copy));
  needStaging(0, packed);
  needStaging(1, unpacked);
  if (!out.p2p.empty()) out.comm = PreparedStep::Comm::Grouped;
  return Status::ok();
}

}  // namespace chimera::detail
