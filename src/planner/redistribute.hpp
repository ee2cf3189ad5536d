// SPDX-License-Identifier: Apache-2.0
// The general redistribution step of the planner (private): the point-to-point transfers
// that turn one placement of a tensor into another, and the single collectives that do
// the same job when the transfers happen to form one.
#pragma once

#include <memory>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/plan.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera::detail {

/// The transfers of a many-to-many step that moves a tensor placed as `from` into `to`:
/// every rank holding `to` receives its box piece by piece from ranks holding `from`
/// (intersection of what each source holds with what each destination needs). A piece the
/// destination already holds is a local copy; otherwise the source is the holder nearest
/// in mesh coordinates (unique: the holders of a piece differ only on `from`'s replicated
/// axes, so the nearest takes the destination's coordinates there).
/// Axes partial in both layouts are pinned: data moves only between ranks with equal
/// coordinates on them. Preconditions (InvalidArgument otherwise): both layouts valid for
/// `spec`, and every partial axis of `from` is partial in `to` with the same op.
/// Transfers are ordered by destination rank, then by source box (row-major).
[[nodiscard]] Status manyToManyTransfers(const Layout& from, const Layout& to, const TensorSpec& spec,
                                         std::vector<BoxTransfer>& out);

/// The many-to-many transfers out of one layout into several targets: manyToManyTransfers
/// for each, with the index of what each holder of `from` holds built once for all.
class TransferSource {
 public:
  /// A source of the tensor `spec` placed as `from`; both must outlive it.
  TransferSource(const Layout& from, const TensorSpec& spec);
  ~TransferSource();
  TransferSource(const TransferSource&) = delete;
  TransferSource& operator=(const TransferSource&) = delete;

  /// What manyToManyTransfers(from, to, spec, out) returns.
  [[nodiscard]] Status transfersTo(const Layout& to, std::vector<BoxTransfer>& out);

  /// Every transfer into `to` as a TransferFlow (`flows`, in transfersTo's order), and as a
  /// BoxTransfer only those that `rank` sends or receives (`transfers`; all of them for
  /// kWorldPlan): a rank's part of the many-to-many with the boxes of no other rank built.
  [[nodiscard]] Status transfersTo(const Layout& to, int rank, std::vector<BoxTransfer>& transfers,
                                   std::vector<TransferFlow>& flows);

  /// How many transfers transfersTo(to) would return (local ones included), counted from
  /// the box geometry in O(ranks x dims) without building them. Fails as transfersTo does.
  [[nodiscard]] Status countTransfers(const Layout& to, std::int64_t& out) const;

  /// Whether every transfer of transfersTo(to) would be local (src == dst: each holder of
  /// `to` already holds its box), found without building them. Fails as transfersTo does
  /// on bad layouts; a false answer may still meet transfersTo's other errors.
  [[nodiscard]] Status isLocal(const Layout& to, bool& out) const;

 private:
  struct Index;
  Status checkTarget(const Layout& to) const;
  const Layout& from_;
  const TensorSpec& spec_;
  std::unique_ptr<Index> index_;  // built on first use, once `from` is known valid
};

/// The smallest group along which `transfers` (moving `from` into `to`) form an AllToAll:
/// both layouts held by the same ranks, and every rank sends exactly one block of one
/// common size to every member of its group (itself included) and to no one else.
/// Empty when there is none. `flows` are every rank's transfers (TransferSource::transfersTo).
AxisSet allToAllGroup(const Layout& from, const Layout& to, const std::vector<TransferFlow>& flows);

/// Every single chain op (AllGather, AllToAll, Send, Broadcast) whose effect turns `from`
/// into exactly `to`, in a fixed order: the plain collectives a many-to-many collapses to.
std::vector<ChainOp> collectivesBetween(const Layout& from, const Layout& to, const TensorSpec& spec);

/// The plan step that runs chain op `op` with effect `effect` (Slice becomes LocalCopy).
PlanStep stepForChainOp(const ChainOp& op, const OpEffect& effect);

}  // namespace chimera::detail
