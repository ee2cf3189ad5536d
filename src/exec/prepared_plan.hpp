// SPDX-License-Identifier: Apache-2.0
// One Plan resolved for this rank: which steps it takes part in, the backend calls with
// their operands as (slot, byte offset), the box packs/unpacks around them, and the scratch
// memory, allocated once. Running it only resolves pointers and issues the calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/planning/plan.hpp"
#include "chimera/status.hpp"
#include "exec/scratch_pool.hpp"

namespace chimera::detail {

/// Memory an operand lives in: a plan buffer (slot = its index; 0 the user input, 1 the user
/// output, the rest scratch) or one of the two staging areas (slot = buffers + 0 or + 1).
struct SlotRef {
  int slot = 0;            ///< which memory
  std::size_t offset = 0;  ///< byte offset into it
};

/// A local operation in the backend's memory space.
struct LocalAction {
  enum class Kind : std::uint8_t { Copy, Pack, Unpack, Scale };
  Kind kind = Kind::Copy;
  SlotRef src;                      ///< Copy/Scale: source; Pack: the tensor; Unpack: the packed data
  SlotRef dst;                      ///< Copy/Scale: destination; Pack: the packed data; Unpack: the tensor
  std::size_t bytes = 0;            ///< Copy: bytes
  std::size_t count = 0;            ///< Scale: elements
  double factor = 1;                ///< Scale: the factor
  std::vector<std::int64_t> shape;  ///< Pack/Unpack: the tensor's local shape
  Box box;                          ///< Pack/Unpack: the box, local coordinates
  /// Pack/Unpack after mergeBoxActions: every box of this call (`box` first) and, per box, its
  /// packed operand (`dst` of a Pack, `src` of an Unpack first): one backend call for all.
  std::vector<Box> boxes;
  std::vector<SlotRef> packed;
};

/// Byte alignment of every box's offset in a staging area: cudaMalloc's alignment, so the
/// pack kernels take their 16-byte vector path for every box, not only the first.
inline constexpr std::size_t kStagingAlignment = 256;
/// `offset` rounded up to kStagingAlignment.
constexpr std::size_t alignStaging(std::size_t offset) {
  return (offset + kStagingAlignment - 1) / kStagingAlignment * kStagingAlignment;
}

/// Merges each run of consecutive Packs of one tensor (same source and shape), and of
/// consecutive Unpacks into one tensor, into its first action (filling `boxes`/`packed`),
/// so the backend moves them in one call; single Packs/Unpacks get one-element lists.
void mergeBoxActions(std::vector<LocalAction>& actions);

/// A Copy of `bytes` from `src` to `dst`.
LocalAction copyAction(SlotRef src, SlotRef dst, std::size_t bytes);
/// A Pack of `box` of the tensor of `shape` at `tensor` into `packed`.
LocalAction packAction(SlotRef tensor, SlotRef packed, const std::vector<std::int64_t>& shape, const Box& box);
/// An Unpack of `packed` into `box` of the tensor of `shape` at `tensor`.
LocalAction unpackAction(SlotRef packed, SlotRef tensor, const std::vector<std::int64_t>& shape, const Box& box);
/// A Scale of `count` elements by `factor`.
LocalAction scaleAction(SlotRef src, SlotRef dst, std::size_t count, double factor);

/// A point-to-point operand of a grouped call.
struct P2PRef {
  P2POp::Kind kind = P2POp::Kind::Send;
  SlotRef buffer;
  std::size_t count = 0;  ///< elements
  int peer = 0;           ///< world rank
  /// Moved as a box of the plan buffer (Backend::movesBoxes): `box` of the tensor of `shape`
  /// at `buffer`, no pack or unpack; empty `shape`: `count` contiguous elements.
  Box box{};
  std::vector<std::int64_t> shape{};
};

/// This rank's part of one plan step: local work, one communication, local work.
struct PreparedStep {
  /// The communication: a collective, a grouped point-to-point call, or none.
  enum class Comm : std::uint8_t { None, AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, Grouped };
  std::vector<LocalAction> before;
  Comm comm = Comm::None;
  SlotRef send;           ///< collective send operand
  SlotRef recv;           ///< collective recv operand
  std::size_t count = 0;  ///< collective count, in the backend's convention for the call
  AxisSet axes;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  std::vector<P2PRef> p2p;  ///< Grouped: every send and receive of this rank
  std::vector<LocalAction> after;
};

/// Local copies made by running plans: pack, unpack and copy calls, and their bytes.
struct CopyCount {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;
};

/// Grouped point-to-point calls the prepared plans of this thread have issued, failed ones
/// included. A Session reads it around a step to tell whether a hand-off that failed had
/// already met its peer (see Session::Impl::releasePeers).
std::uint64_t groupedCallsIssued();

/// A plan prepared for this rank of `backend`. Owns its scratch (returned to the pool, or
/// freed, by the destructor).
class PreparedPlan {
 public:
  PreparedPlan() = default;
  PreparedPlan(const PreparedPlan&) = delete;
  PreparedPlan& operator=(const PreparedPlan&) = delete;
  ~PreparedPlan();

  /// Resolves `plan` for `backend.rank()` and takes its scratch from `pool` (the backend's
  /// scratch pool; nullptr: straight from backend.allocate). Collective over the
  /// world: every rank must prepare the same plan; a failure on any rank fails all (Mismatch
  /// on the others). InvalidArgument when the plan is malformed (buffer index out of range, mesh different from the
  /// backend's, invalid layout, a step that writes the input buffer, boxes that do not fit).
  [[nodiscard]] Status prepare(Backend& backend, const Plan& plan, ScratchPool* pool = nullptr,
                               Stream stream = nullptr);
  /// Resolves `plan` for `backend.rank()` without communicating: for a caller that agreed on
  /// the plan with every rank it touches already. Every group the rank's steps use must
  /// exist (`Backend::createGroups`): InvalidArgument naming the group otherwise. Scratch as
  /// for prepare.
  [[nodiscard]] Status prepareAgreed(Backend& backend, const Plan& plan, ScratchPool* pool = nullptr);
  /// InvalidArgument naming both sizes when a buffer is smaller than this rank's part of the
  /// input or output, or null where the rank holds some.
  [[nodiscard]] Status checkBuffers(const void* input, std::size_t inputBytes, const void* output,
                                    std::size_t outputBytes) const;
  /// Runs the prepared plan on this rank's buffers (checked against the local sizes first),
  /// every backend call ordered on `stream`. A copy whose source and destination are the same
  /// bytes (a consumed part already in place) is skipped.
  [[nodiscard]] Status run(const void* input, std::size_t inputBytes, void* output, std::size_t outputBytes,
                           Stream stream);
  /// The local copies of every run so far (skipped copies not counted).
  const CopyCount& copies() const { return copies_; }
  /// Bytes of the rank's input / output buffer (0 when it holds none).
  std::size_t inputBytes() const { return bufferBytes_[0]; }
  std::size_t outputBytes() const { return bufferBytes_[1]; }

 private:
  Status resolve(const Plan& plan);
  Status createGroups(const Plan& plan);
  void gatherInPlace(const Plan& plan);
  Status prepareStep(const Plan& plan, const PlanStep& step, PreparedStep& out);
  Status prepareCollective(const Plan& plan, const PlanStep& step, PreparedStep& out);
  Status prepareAllToAll(const Plan& plan, const PlanStep& step, PreparedStep& out);
  Status prepareSend(const Plan& plan, const PlanStep& step, PreparedStep& out);
  Status prepareManyToMany(const Plan& plan, const PlanStep& step, PreparedStep& out);
  Status prepareLocalCopy(const Plan& plan, const PlanStep& step, PreparedStep& out);
  Status runLocal(const std::vector<LocalAction>& actions, Stream stream);
  Status runComm(PreparedStep& step, Stream stream);
  std::byte* resolve(SlotRef ref) const { return slots_[static_cast<std::size_t>(ref.slot)] + ref.offset; }
  int stagingSlot(int which) const { return static_cast<int>(bufferBytes_.size()) + which; }
  void needStaging(int which, std::size_t bytes);
  Status allocateScratch(std::size_t bytes, void** out);

  Backend* backend_ = nullptr;
  DataType dtype_ = DataType::F32;
  std::size_t elementSize_ = 1;
  int rank_ = 0;
  std::vector<std::size_t> bufferBytes_;           // per plan buffer: this rank's bytes (0 = not held)
  std::vector<std::vector<std::int64_t>> shapes_;  // per plan buffer: local shape
  std::size_t stagingBytes_[2] = {0, 0};
  ScratchPool* pool_ = nullptr;
  std::vector<void*> owned_;       // scratch from pool_ (or backend.allocate without one)
  std::vector<std::byte*> slots_;  // per slot: base pointer (0/1 set per run)
  std::vector<PreparedStep> steps_;
  std::vector<P2POp> ops_;       // reused by every grouped call
  std::vector<void*> pointers_;  // reused by every batched pack/unpack
  CopyCount copies_;
};

}  // namespace chimera::detail
