// SPDX-License-Identifier: Apache-2.0
// The state behind chimera::Session: the open window, the window cache, the executor.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "chimera/executor.hpp"
#include "chimera/session.hpp"
#include "session/backend_buffer.hpp"
#include "session/window.hpp"

namespace chimera::detail {

/// A window planned once: its steps, and what they cost this rank.
struct CachedWindow {
  detail::WindowKey key;
  std::vector<std::uint8_t> agreedAliased;  ///< per value: aliased on some rank
  std::vector<std::uint8_t> agreedUncovered;  ///< per range candidate: misses some rank's range
  std::vector<detail::WindowStep> steps;
  std::vector<std::uint8_t> fused;  ///< per step: runs a fused plan
  std::uint64_t bytesAsRecorded = 0;
  std::uint64_t bytesSent = 0;
};

}  // namespace chimera::detail

namespace chimera {

struct Session::Impl {
  Impl(Backend& b, const SessionOptions& o)
      : backend(b), options(o), executor(b, o.cost), staging(b), agreement(b) {}

  Status checkHandle(TensorHandle t) const;
  // Records `op`; in-place kinds (allreduce, broadcast) ignore `output`.
  Status record(TensorHandle in, const ChainOp& op, void* output, std::size_t outputBytes, TensorHandle& out);
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
  Status allReduceMax(std::vector<std::int64_t>& words);
  void resolveRanges(const std::vector<std::uint8_t>& uncovered);
  Status runStep(const detail::WindowStep& step, bool fused);
  Status runStaged(const detail::WindowStep& step, const detail::WindowValue& in, detail::WindowValue& out);
  Status createGroup(AxisSet axes);

  Backend& backend;
  SessionOptions options;
  Executor executor;
  detail::Window window;
  std::uint64_t windowId = 1;
  std::unordered_multimap<std::uint64_t, std::unique_ptr<detail::CachedWindow>> cache;
  SessionStats stats;
  detail::BackendBuffer staging;    ///< a consumed part on its way into the final buffer
  detail::BackendBuffer agreement;  ///< the agreement's words
  std::vector<std::int64_t> agreementWords;
  std::vector<std::uint32_t> createdGroups;  ///< axis sets whose communicator the backend made
};

}  // namespace chimera
