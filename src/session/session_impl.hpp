// SPDX-License-Identifier: Apache-2.0
// The state behind chimera::Session: the open window, the window cache, the executor.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "chimera/executor.hpp"
#include "chimera/session.hpp"
#include "exec/agreement.hpp"
#include "session/backend_buffer.hpp"
#include "session/window.hpp"

namespace chimera::detail {

/// A window planned once: its steps, and what they cost this rank.
struct CachedWindow {
  detail::WindowKey key;
  std::vector<std::uint8_t> agreedAliased;    ///< per value: aliased on some rank
  std::vector<std::uint8_t> agreedUncovered;  ///< per range candidate: misses some rank's range
  std::vector<detail::WindowStep> steps;
  std::vector<std::uint8_t> fused;  ///< per step: runs a fused plan
  std::uint64_t bytesAsRecorded = 0;
  std::uint64_t bytesSent = 0;
  std::uint64_t rankBytesAsRecorded = 0;
  std::uint64_t rankBytesSent = 0;
};

}  // namespace chimera::detail

namespace chimera {

struct Session::Impl {
  Impl(Backend& b, const SessionOptions& o, std::unique_ptr<PlanCost> owned)
      : backend(b),
        options(o),
        ownedCost(std::move(owned)),
        cost(o.cost != nullptr ? o.cost : ownedCost.get()),
        executor(b, cost),
        staging(b),
        reduction(b),
        handOffs(b) {}

  Status checkHandle(TensorHandle t) const;
  // Records `op`; in-place kinds (allreduce, broadcast) ignore `output`.
  Status record(TensorHandle in, const ChainOp& op, void* output, std::size_t outputBytes, TensorHandle& out);
  // Per-rank recording: the receiving side of a hand-off sent with `stageStep`.
  Status recordReceive(const TensorSpec& spec, const Layout& layout, AxisSet axis, int stageStep, void* buffer,
                       std::size_t bytes, TensorHandle& out);
  Status flush();
  Status abandon(const Status& reason);
  void startWindow();
  Status lookup(const detail::WindowKey& key, detail::CachedWindow*& out);
  Status planWindow(detail::CachedWindow& out);
  /// The world's verdicts on the window (see `agree` in session_flush.cpp).
  struct Verdicts {
    std::vector<std::uint8_t> aliased;
    std::vector<std::uint8_t> uncovered;
  };
  Status agree(const detail::WindowKey& key, const Status& local, Verdicts& out);
  Status agreeOrRelease(const detail::WindowKey& key, Verdicts& out);
  // The groups an agreement over `scope` reduces over: the scope's own, or per rank (when its
  // communicator was not created) each of its single-axis groups.
  Status agreementGroups(AxisSet scope, std::vector<AxisSet>& groups);
  // The ranks a window's agreement spans: SPMD the world; per rank the groups of the mesh
  // axes its tensors are spread over (every axis of size > 1 without a stage placement).
  AxisSet agreementScope() const;
  void resolveRanges(const std::vector<std::uint8_t>& uncovered);
  // Per-rank recording: adds the receiving steps, exchanges the hand-off descriptions with
  // the peers and completes both kinds of hand-off step (hand_off.hpp); `local` is the
  // window's verdict so far (an error still meets the peers, see exchangeHandOffs).
  Status completeHandOffs(std::vector<detail::WindowStep>& steps, const std::vector<std::uint8_t>& aliased,
                          const Status& local);
  // Plans one step (and creates the group of a direct call).
  Status planStep(const detail::WindowStep& step, const ChainPlan*& plan);
  // The recorded calls of a step whose chosen plan is the chain as issued, as steps of their own.
  std::vector<detail::WindowStep> recordedCalls(const detail::WindowStep& step, const ChainPlan& plan);
  // WindowStep::placedAt of a chain step planned as `plan`.
  std::int64_t placement(const detail::WindowStep& step, const ChainPlan& plan) const;
  // Whether the fused plan of a step, as this Session runs it, beats its calls as recorded.
  bool fusionPays(const detail::WindowStep& step, const ChainPlan& plan) const;
  // Appends a planned step to `out` with its bytes and its placement.
  Status addStep(detail::WindowStep step, const ChainPlan& plan, detail::CachedWindow& out);
  Status runStep(const detail::WindowStep& step, bool fused);
  Status runPlaced(const detail::WindowStep& step, ChainMode mode, const void* input, std::size_t inputBytes,
                   detail::WindowValue& out);
  void releasePeers(const std::vector<detail::WindowStep>& steps, std::size_t failed, bool metPeer,
                    const Status& failure);
  Status runStaged(const detail::WindowStep& step, const TensorSpec& spec, const void* input, std::size_t inputBytes,
                   detail::WindowValue& out);
  Status createGroup(AxisSet axes);

  Backend& backend;
  SessionOptions options;
  std::unique_ptr<PlanCost> ownedCost;  ///< the model options.topology names, when options.cost is null
  const PlanCost* cost;                 ///< prices this session's plans
  Executor executor;
  detail::Window window;
  std::uint64_t windowId = 1;
  std::unordered_multimap<std::uint64_t, std::unique_ptr<detail::CachedWindow>> cache;
  SessionStats stats;
  detail::BackendBuffer staging;       ///< a consumed part on its way into the final buffer
  detail::BackendReduction reduction;  ///< the agreements' MIN over the backend
  detail::BackendBuffer handOffs;      ///< the hand-off exchange's messages
  std::vector<std::uint8_t> agreementFlags;
  std::vector<std::uint32_t> createdGroups;  ///< axis sets whose communicator the backend made
};

}  // namespace chimera
