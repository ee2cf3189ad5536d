// SPDX-License-Identifier: Apache-2.0
// The recorded window of a Session (values and calls), its cache key, and the analysis that
// turns it into the chains to run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/tensor_spec.hpp"
#include "session/range_declaration.hpp"

namespace chimera::detail {

/// One value of a window: a registered tensor or a call's result.
struct WindowValue {
  TensorSpec spec;
  Layout layout;
  void* buffer = nullptr;                  ///< this rank's local buffer (nullptr where it holds nothing)
  std::size_t bytes = 0;                   ///< its size
  int producer = -1;                       ///< index of the call that wrote it; -1 for a registered tensor
  int storage = 0;                         ///< values written in place share the storage of their input
  bool overwritten = false;                ///< an in-place call replaced it; it can no longer be read
  std::optional<Layout> declared;          ///< the consume declaration by layout, if any
  std::optional<ByteRange> declaredRange;  ///< the consume declaration by byte range, if any
  bool received = false;                   ///< per-rank recording: arrives by a hand-off from another stage
  bool handedOff = false;                  ///< per-rank recording: sent to another stage (not held here)
};

/// Per-rank recording: this rank's receiving side of a hand-off into value `value`.
struct WindowReceive {
  std::uint32_t value = 0;
  AxisSet axis;              ///< the pipeline axis
  int stageStep = 1;         ///< the send's direction: +1 from the previous stage, -1 from the next
  std::size_t position = 0;  ///< calls recorded before it (orders it among the steps)
};

/// One recorded call: `op` reads value `input` and writes value `output`.
struct WindowCall {
  ChainOp op;
  std::uint32_t input = 0;
  std::uint32_t output = 0;
  bool inPlace = false;
};

/// Everything recorded since the last flush.
struct Window {
  std::vector<WindowValue> values;
  std::vector<WindowCall> calls;
  std::vector<WindowReceive> receives;  ///< per-rank recording: hand-offs this rank receives
  int storages = 0;                     ///< storage ids handed out
};

/// The cache key of a window: the rank-independent description (calls, registered specs and
/// layouts, declarations) plus this rank's verdicts: aliasing per value, and per byte-range
/// declaration which of its candidate layouts miss this rank's range.
struct WindowKey {
  std::vector<std::int64_t> words;    ///< calls and specs, rank-independent
  std::vector<Layout> layouts;        ///< registered layouts, then declared layouts
  std::vector<std::uint8_t> aliased;  ///< per value: its buffer overlaps another storage's (this rank)
  /// Per byte-range declaration (in value order), per candidate (`rangeCandidates`): 1 when
  /// the candidate's part on this rank does not hold the declared range.
  std::vector<std::uint8_t> uncovered;
  std::uint64_t hash = 0;       ///< of the four fields above
  std::int64_t sharedHash = 0;  ///< of words and layouts only (equal on every rank), 62 bits
  bool operator==(const WindowKey& other) const {
    return hash == other.hash && words == other.words && aliased == other.aliased && uncovered == other.uncovered &&
           layouts == other.layouts;
  }
};

/// True when the byte ranges [a, a + aBytes) and [b, b + bBytes) share a byte; a null or empty
/// range shares none. Decides aliasing between window values and between a call's buffers.
bool overlaps(const void* a, std::size_t aBytes, const void* b, std::size_t bBytes);

/// Builds the key of `window` with the verdicts of `rank` from its buffers and byte ranges.
WindowKey windowKey(const Window& window, int rank);

/// A rank-independent text of the window (for the agreement hash and debug logs).
std::string windowText(const Window& window);

/// One unit of work of a window: a chain of calls run through the Executor, or a single
/// in-place call issued on the backend exactly as recorded.
struct WindowStep {
  enum class Kind : std::uint8_t { Chain, DirectAllReduce, DirectBroadcast };
  Kind kind = Kind::Chain;
  ChainRequest request;      ///< the chain (for Direct: its one op, for bytes and logs)
  std::vector<int> calls;    ///< indices of the recorded calls it covers
  std::uint32_t input = 0;   ///< value read
  std::uint32_t output = 0;  ///< value written (the chain's final value)
  bool declared = false;     ///< the output carries a consume declaration in force
  /// Per-rank recording: a step ending in a send (its consume comes from the receiving peer),
  /// or the receiving side of a hand-off (its chain comes from the sending peer).
  enum class HandOff : std::uint8_t { None, Send, Receive };
  HandOff handOff = HandOff::None;
  int peer = -1;  ///< hand-off: the world rank at the other end
  /// Receive: the recorded calls on the received value that joined the hand-off's chain.
  std::vector<int> tail;
  /// One recorded call run as issued (the plan chosen for its chain was the chain itself):
  /// the chain's baseline, on the caller's buffers, with no consume declaration.
  bool asRecorded = false;
  /// Chain steps with a consume declaration: where the consumed part goes. -1 through the
  /// Session's staging buffer, then into its box of the output buffer; otherwise the byte
  /// offset in the output buffer at which the plan writes it directly (its box is one
  /// contiguous stretch there, and an input sharing that buffer is safe to write over).
  std::int64_t placedAt = -1;
};

/// Call `callIndex` of `window` as a step of its own. With `declared`, its output's consume
/// declaration is in force; without, an in-place call is issued on the backend as recorded
/// (Direct kinds) and any other runs as a chain of one writing its full result.
WindowStep singleStep(const Window& window, int callIndex, bool declared);

/// Joins the calls of `window` into steps, given which values are aliased on some rank.
/// A call's output continues a chain only when exactly one later call reads it, it has no
/// declaration and is not aliased; a chain of several calls is kept only when its final value
/// carries a declaration in force (read by no call, not aliased), else it is split into
/// single calls. With `fusion` false every call is a step of its own and no declaration is in
/// force. Steps are ordered by their first call, which respects every dependency.
std::vector<WindowStep> analyseWindow(const Window& window, const std::vector<std::uint8_t>& aliased, bool fusion);

}  // namespace chimera::detail
