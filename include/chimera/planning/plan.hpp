// SPDX-License-Identifier: Apache-2.0
// Plans (unstable tier): the steps the planner chose for a chain, each a collective, a
// many-to-many box transfer or a local op between buffers, with their byte counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "chimera/op_kind.hpp"
#include "chimera/tensor_spec.hpp"
#include "chimera/types.hpp"

namespace chimera {

/// One point-to-point transfer of a many-to-many step: `src` sends the elements of
/// `srcBox` (in its local tensor) to `dst`, which writes them into `dstBox` (in its local
/// tensor). Both boxes have the same extent; either may be non-contiguous (pack/unpack).
/// `src == dst` is a local copy.
struct BoxTransfer {
  int src = 0;             ///< world rank that sends
  int dst = 0;             ///< world rank that receives
  Box srcBox;              ///< box in the source buffer's local coordinates
  Box dstBox;              ///< box in the destination buffer's local coordinates
  std::int64_t bytes = 0;  ///< payload size
  bool operator==(const BoxTransfer&) const = default;
};

/// What the cost models need of one transfer of a many-to-many step, without its boxes:
/// who sends to whom, how much, and how the box lies in each side's buffer.
struct TransferFlow {
  int src = 0;                   ///< world rank that sends
  int dst = 0;                   ///< world rank that receives
  std::int64_t bytes = 0;        ///< payload size
  std::int64_t srcRunBytes = 0;  ///< bytes of each contiguous run of the box in the source buffer (`bytes`: one run)
  std::int64_t dstRunBytes = 0;  ///< the same in the destination buffer
  bool operator==(const TransferFlow&) const = default;
};

/// Boxes smaller than this are packed even where the transport moves boxes: the address and
/// the answer a moved box costs outweigh a pack and an unpack of a few pages.
inline constexpr std::int64_t kMinMovedBoxBytes = std::int64_t{64} << 10;
/// A side whose runs are shorter than a page packs (or unpacks) them locally and the box moves
/// from (or into) the packed copy: a read pins every page a run touches, so runs of part of a
/// page would cost a page each.
inline constexpr std::int64_t kMinReadRunBytes = 4096;

/// What reading one run of a box from the sender's memory costs, as the bytes of a local pass:
/// a page. Measured on the 2-core host with process_vm_readv of 16 MiB: runs of 4 KiB took 0.2
/// us each over one contiguous read, about a memcpy of 4 KiB, and runs of 16 KiB the same per run.
inline constexpr std::int64_t kReadRunPassBytes = 4096;

/// The local passes of one transfer between two ranks, and whether it moves as a box.
struct TransferPasses {
  bool movedAsBox = false;  ///< the receiver reads the box from the sender's memory (Backend::movesBoxes)
  bool pack = false;        ///< the sender packs its box into staging first
  bool unpack = false;      ///< the receiver unpacks the box from staging after
};
/// How a transfer of `bytes` whose box lies in runs of `srcRunBytes` (sender) and
/// `dstRunBytes` (receiver) moves, where the pair `movesBoxes` or not: a box of at least
/// kMinMovedBoxBytes that has, on one side, runs of at least kMinReadRunBytes but not one run
/// moves as a box, packed or unpacked only on a side whose runs are shorter; every other box
/// that is not one run is packed and unpacked. The executor and the cost models decide alike
/// with it.
TransferPasses transferPasses(std::int64_t bytes, std::int64_t srcRunBytes, std::int64_t dstRunBytes, bool movesBoxes);

/// The rank of a world plan (Plan::rank): every rank's part is in it.
inline constexpr int kWorldPlan = -1;

/// A buffer of a plan. Every rank that `layout.holds(rank)` has one of `localShape`;
/// other ranks have none. Buffer 0 is the input, buffer 1 the output, the rest scratch.
struct PlanBuffer {
  Layout layout;                         ///< how the tensor is placed in this buffer
  std::vector<std::int64_t> localShape;  ///< shape on each holding rank
  std::int64_t localBytes = 0;           ///< bytes on each holding rank
};

/// One step of a plan: reads buffer `input`, writes buffer `output` (equal only for a
/// Scale applied in place to the output). The ranks that take part are the holders of the
/// input buffer, plus the holders of the output buffer for Send, Broadcast and ManyToMany
/// (a stage hand-off or stage broadcast fills ranks that held nothing).
struct PlanStep {
  /// The kinds used in plans (`opKindUsedIn(kind, kOpInPlan)`, op_kind.hpp):
  /// - AllReduce: output = op over the group along `axes` of input
  /// - ReduceScatter: op over the group, member g keeps block g of `dim`
  /// - AllGather: output = concatenation along `dim` of the members' inputs, by group index
  /// - AllToAll: member i splits input along `toDim` into n blocks, block j goes to member j,
  ///   which concatenates what it receives along `dim` (= FROM) by sender index
  /// - Broadcast: the member with group index `root` copies its input to every member
  /// - Send: along the single axis `axes`: each input holder sends its buffer to the rank at
  ///   the output's stage with equal other coordinates
  /// - ManyToMany: the explicit `transfers`, issued together
  /// - LocalCopy: each output holder copies its output box out of its input (no communication)
  /// - Scale: output = input * `scale` elementwise (no communication)
  using Kind = OpKind;
  Kind kind = Kind::LocalCopy;
  int input = 0;
  int output = 1;
  AxisSet axes;                 ///< collectives: the group
  ReduceOp op = ReduceOp::Sum;  ///< AllReduce/ReduceScatter
  int dim = 0;                  ///< ReduceScatter/AllGather: the dim; AllToAll: FROM
  int toDim = 0;                ///< AllToAll: TO
  int root = 0;                 ///< Broadcast: group index of the root
  std::int64_t scale = 1;       ///< Scale: the factor
  /// ManyToMany: ordered by destination, then source box; in a rank's plan (Plan::rank)
  /// only the transfers that rank sends or receives.
  std::vector<BoxTransfer> transfers;
  /// ManyToMany: every transfer of every rank, in the order of a world plan's `transfers`,
  /// on any plan (what bytes and costs are computed from, so every rank prices alike).
  std::vector<TransferFlow> flows;
  /// ManyToMany: non-empty when the transfers form an AllToAll over this group (every
  /// member sends one equal-sized block to every member, itself included), so an executor
  /// may pack the blocks by destination and issue one allToAll instead of grouped sends.
  AxisSet allToAllGroup;
  std::string origin;  ///< what the step stands for (the chain op, "reduce partials", ...)
};

/// "allreduce", "reducescatter", "allgather", "alltoall", "broadcast", "send",
/// "manytomany", "localcopy", "scale" (opKindName).
std::string_view planStepKindName(PlanStep::Kind kind);

struct Plan;
/// The one text of a step of `plan`, in the chain's op syntax: "allreduce:tp",
/// "reducescatter:tp:0", "alltoall:ep+tp:0:1", "broadcast:pp:0", "send:pp", "manytomany(12
/// transfers, an alltoall over dp+sp)", "localcopy", "scale:4" (the reduce op shows in the
/// input layout, "tp=P(max)"). Plan::toString and chimera-plan --json print steps with it.
std::string planStepText(const Plan& plan, const PlanStep& step);

/// An explicit program that turns the input buffer into the output buffer. Every rank
/// derives the same world plan from the same inputs; a rank's plan (`rank` >= 0) is the
/// world plan with each ManyToMany's `transfers` cut down to those of that rank (its
/// steps, buffers, flows and byte counts are the world plan's).
struct Plan {
  static constexpr int kInput = 0;   ///< index of the input buffer
  static constexpr int kOutput = 1;  ///< index of the output buffer
  TensorSpec spec;                   ///< the logical tensor
  std::vector<PlanBuffer> buffers;   ///< [input, output, scratch...]
  std::vector<PlanStep> steps;       ///< run in order
  int rank = kWorldPlan;             ///< kWorldPlan, or the only rank that may run this plan

  /// Adds a buffer placed as `layout` and returns its index.
  int addBuffer(const Layout& layout);
  /// The box a LocalCopy step reads on `onRank`, in the input buffer's local coordinates
  /// (the rank's output box shifted into its input box). Precondition: step is LocalCopy.
  Box localCopySource(const PlanStep& step, int onRank) const;
  /// One line per step ("2. manytomany(4 transfers)  buf2 pp=@0,tp=S0 -> buf3 pp=@1,tp=S0"), each
  /// named by planStepText.
  std::string toString() const;
};

/// Bytes a plan sends: per step and per rank, by the bandwidth-optimal formulas (L = the
/// rank's input bytes, n = group size): AllReduce 2(n-1)/n*L, ReduceScatter (n-1)/n*L,
/// AllGather (n-1)*L, AllToAll (n-1)/n*L, Send L, Broadcast L (every member but the last
/// in pipeline order from the root), ManyToMany the bytes of its non-local transfers,
/// LocalCopy and Scale 0. Fractions round down.
struct PlanBytes {
  std::vector<std::vector<std::int64_t>> stepPerRank;  ///< [step][rank]
  std::vector<std::int64_t> perRank;                   ///< sum over steps
  std::int64_t total = 0;                              ///< sum over ranks
  std::int64_t maxPerRank = 0;                         ///< max over ranks of perRank
  std::int64_t messages = 0;                           ///< point-to-point messages of ManyToMany steps
};

/// The local passes an executor makes around one step (packs of blocks that are not one
/// contiguous run, their unpacks, box copies, local copies and scales, and a page per run of a
/// box read from the sender's memory, kReadRunPassBytes), on the busiest rank.
/// The cost model prices them (localPassSeconds); the planner breaks ties of its cost with them.
struct LocalWork {
  std::uint64_t bytes = 0;  ///< bytes passed through memory on the busiest rank
  int launches = 0;         ///< local calls (kernels) that make them
  int ranks = 0;            ///< ranks that make local passes at once
};
/// The local work of `step` (see LocalWork): ReduceScatter packs its input and AllGather
/// unpacks its output when their blocks along the dim are not contiguous, AllToAll both
/// sides; a ManyToMany packs and unpacks the boxes that are not one run as transferPasses
/// decides (on a transport that `movesBoxes` between every pair of ranks, or on one that
/// moves none) and copies those a rank sends itself; LocalCopy and Scale pass their output.
/// AllReduce, Broadcast, Send: none.
LocalWork stepLocalWork(const Plan& plan, const PlanStep& step, bool movesBoxes = false);
/// The bytes of every step's local work (the sum over steps of each step's busiest rank) on a
/// transport that moves no boxes: what the plan copies wherever it runs.
std::uint64_t planLocalBytes(const Plan& plan);

/// Per-rank bytes of one step (see PlanBytes).
std::vector<std::int64_t> stepBytesPerRank(const Plan& plan, const PlanStep& step);
/// Bytes of the whole plan.
PlanBytes planBytes(const Plan& plan);

}  // namespace chimera
