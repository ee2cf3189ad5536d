// SPDX-License-Identifier: Apache-2.0
// Implements the general redistribution step: box transfers between two placements.
#include "planner/redistribute.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.hpp"

namespace chimera::detail {
namespace {

// The offsets of every rank's box of `layout` (the boxes of Layout::rankBox, all of extent
// localShape), flat: [rank * dims + d]. Non-holders get offset 0, as rankBox gives them.
std::vector<std::int64_t> rankOffsets(const Layout& layout, const TensorSpec& spec) {
  const Mesh& mesh = layout.mesh();
  const auto dims = static_cast<std::size_t>(spec.rank());
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(mesh.size()) * dims, 0);
  std::vector<bool> holds(static_cast<std::size_t>(mesh.size()));
  for (int rank = 0; rank < mesh.size(); ++rank) holds[static_cast<std::size_t>(rank)] = layout.holds(rank);
  for (int dim = 0; dim <= layout.maxShardDim() && dim < spec.rank(); ++dim) {
    const std::vector<int> axes = layout.splitAxes(dim);
    if (axes.empty()) continue;
    std::int64_t shards = 1;
    for (int axis : axes) shards *= mesh.axis(axis).size;
    const std::int64_t extent = spec.shape[static_cast<std::size_t>(dim)] / shards;
    for (int rank = 0; rank < mesh.size(); ++rank) {
      if (!holds[static_cast<std::size_t>(rank)]) continue;
      std::int64_t index = 0;
      for (int axis : axes) index = index * mesh.axis(axis).size + mesh.coordinate(rank, axis);
      offsets[static_cast<std::size_t>(rank) * dims + static_cast<std::size_t>(dim)] = index * extent;
    }
  }
  return offsets;
}

}  // namespace

// Appends the transfers delivering each destination's box from the holders of `from`. The
// boxes of `from` cut the tensor into a grid of cells (per dim `chunks` of `extent`); each
// (cell, coordinates on the pinned axes) key lists the ranks holding it. Built once per
// source layout, so the per-transfer work allocates only the transfer's own two boxes.
struct TransferSource::Index {
  const Layout& from;
  const Mesh& mesh;
  std::size_t dims = 0;
  std::vector<std::int64_t> extent;   // of every box of `from`
  std::vector<std::int64_t> chunks;   // cells per dim
  std::vector<std::int64_t> offsets;  // rankOffsets of `from`
  AxisSet pinned;
  std::int64_t pinCount = 1;
  std::vector<int> pinIndex;                             // rank -> group index on the pinned axes
  std::vector<std::int32_t> holderBegin;                 // key -> first entry in holderRanks (prefix sums)
  std::vector<int> holderRanks;                          // per key, the ranks holding it, ascending
  std::vector<int> freeAxes;                             // the replicated axes of `from`
  std::vector<int> strides;                              // rank stride of each mesh axis (row-major)
  std::vector<std::int64_t> lo, hi, index;               // deliver's cell range and cursor
  std::vector<std::int64_t> srcOffset, dstOffset, size;  // piece()'s boxes
  std::int64_t elementSize = 1;

  Index(const Layout& f, const TensorSpec& spec)
      : from(f),
        mesh(f.mesh()),
        dims(spec.shape.size()),
        extent(f.localShape(spec)),
        offsets(rankOffsets(f, spec)),
        lo(dims),
        hi(dims),
        index(dims),
        srcOffset(dims),
        dstOffset(dims),
        size(dims) {
    const int world = mesh.size();
    chunks.resize(dims);
    std::int64_t cells = 1;
    for (std::size_t d = 0; d < dims; ++d) cells *= chunks[d] = spec.shape[d] / extent[d];
    pinned = from.axesOfKind(Placement::Kind::Partial);
    pinCount = mesh.groupSize(pinned);
    elementSize = static_cast<std::int64_t>(dataTypeSize(spec.dtype));
    strides.assign(static_cast<std::size_t>(mesh.numAxes()), 1);
    for (int axis = mesh.numAxes() - 1; axis > 0; --axis) {
      strides[static_cast<std::size_t>(axis - 1)] = strides[static_cast<std::size_t>(axis)] * mesh.axis(axis).size;
    }
    for (int axis = 0; axis < mesh.numAxes(); ++axis) {
      if (from.placement(axis).isReplicate()) freeAxes.push_back(axis);
    }
    pinIndex.resize(static_cast<std::size_t>(world));
    for (int rank = 0; rank < world; ++rank) pinIndex[static_cast<std::size_t>(rank)] = mesh.groupIndex(rank, pinned);
    holderBegin.assign(static_cast<std::size_t>(cells * pinCount) + 1, 0);
    for (int rank = 0; rank < world; ++rank) {
      if (from.holds(rank)) ++holderBegin[static_cast<std::size_t>(heldKey(rank)) + 1];
    }
    for (std::size_t k = 1; k < holderBegin.size(); ++k) holderBegin[k] += holderBegin[k - 1];
    holderRanks.resize(static_cast<std::size_t>(holderBegin.back()));
    std::vector<std::int32_t> next(holderBegin.begin(), holderBegin.end() - 1);
    for (int rank = 0; rank < world; ++rank) {
      if (!from.holds(rank)) continue;
      holderRanks[static_cast<std::size_t>(next[static_cast<std::size_t>(heldKey(rank))]++)] = rank;
    }
  }

  // The key of (cell, rank's coordinates on the pinned axes).
  std::int64_t key(std::int64_t cell, int rank) const {
    return cell * pinCount + pinIndex[static_cast<std::size_t>(rank)];
  }

  // The key of the cell `rank` holds in `from`.
  std::int64_t heldKey(int rank) const {
    std::int64_t cell = 0;
    for (std::size_t d = 0; d < dims; ++d) cell = cell * chunks[d] + offsetOf(rank, d) / extent[d];
    return key(cell, rank);
  }

  std::int64_t offsetOf(int rank, std::size_t d) const { return offsets[static_cast<std::size_t>(rank) * dims + d]; }

  // The holder of key `k` to send to `dst`: the one nearest in mesh coordinates. The holders
  // of a key are a product set: coordinates fixed on the axes that split, stage or pin
  // `from`, any coordinate on its replicated axes. So the nearest is unique: any holder with
  // its replicated coordinates replaced by dst's (dst itself when it holds the key). O(axes).
  int chooseSource(std::int64_t k, int dst) const {
    const int holder = holderRanks[static_cast<std::size_t>(holderBegin[static_cast<std::size_t>(k)])];
    int src = holder;
    for (const int axis : freeAxes) {
      src += (mesh.coordinate(dst, axis) - mesh.coordinate(holder, axis)) * strides[static_cast<std::size_t>(axis)];
    }
    return src;
  }

  Box cellBox() const {
    Box box;
    for (std::size_t d = 0; d < dims; ++d) {
      box.offset.push_back(index[d] * extent[d]);
      box.extent.push_back(extent[d]);
    }
    return box;
  }

  // The part of the current cell (`index`) that `need` overlaps, sent by `src`, as a flow;
  // its boxes' offsets and extent are left in srcOffset, dstOffset and size.
  TransferFlow piece(int src, int dst, const std::int64_t* needOffset, const std::int64_t* needExtent) {
    TransferFlow f{src, dst, elementSize};
    for (std::size_t d = 0; d < dims; ++d) {
      const std::int64_t cellLo = index[d] * extent[d];
      const std::int64_t low = std::max(cellLo, needOffset[d]);
      const std::int64_t high = std::min(cellLo + extent[d], needOffset[d] + needExtent[d]);
      size[d] = std::max<std::int64_t>(0, high - low);
      srcOffset[d] = low - offsetOf(src, d);
      dstOffset[d] = low - needOffset[d];
      f.bytes *= size[d];
    }
    f.srcRunBytes = runBytes(extent.data());
    f.dstRunBytes = runBytes(needExtent);
    return f;
  }

  // The bytes of each contiguous run of a box of extent `size` in a buffer of `shape`
  // (row-major): the whole dims inside the innermost dim the box does not span, times that dim.
  std::int64_t runBytes(const std::int64_t* shape) const {
    std::int64_t bytes = elementSize;
    std::size_t d = dims;
    while (d > 0 && size[d - 1] == shape[d - 1]) bytes *= size[--d];
    return d > 0 ? bytes * size[d - 1] : bytes;
  }

  // The BoxTransfer of the piece() just computed.
  BoxTransfer boxes(const TransferFlow& f) const {
    BoxTransfer t{f.src, f.dst, {srcOffset, size}, {dstOffset, size}, f.bytes};
    return t;
  }

  // Appends the flows of the box at `needOffset` of extent `needExtent` that `dst` needs,
  // and the transfers of those that `rank` sends or receives (all for kWorldPlan).
  Status deliver(int dst, const std::int64_t* needOffset, const std::int64_t* needExtent, int rank,
                 std::vector<BoxTransfer>& transfers, std::vector<TransferFlow>& flows) {
    for (std::size_t d = 0; d < dims; ++d) {
      lo[d] = needOffset[d] / extent[d];
      hi[d] = (needOffset[d] + needExtent[d] + extent[d] - 1) / extent[d];
      index[d] = lo[d];
    }
    while (true) {
      std::int64_t cell = 0;
      for (std::size_t d = 0; d < dims; ++d) cell = cell * chunks[d] + index[d];
      const std::int64_t k = key(cell, dst);
      CHIMERA_CHECK_ARG(holderBegin[static_cast<std::size_t>(k)] < holderBegin[static_cast<std::size_t>(k) + 1],
                        "no rank holding layout {} has box {} for rank {}", from.toString(), cellBox().toString(), dst);
      const int src = chooseSource(k, dst);
      flows.push_back(piece(src, dst, needOffset, needExtent));
      if (rank == kWorldPlan || src == rank || dst == rank) transfers.push_back(boxes(flows.back()));
      std::size_t d = dims;
      while (d > 0 && ++index[d - 1] == hi[d - 1]) {
        index[d - 1] = lo[d - 1];
        --d;
      }
      if (d == 0) break;
    }
    return Status::ok();
  }
};

TransferSource::TransferSource(const Layout& from, const TensorSpec& spec) : from_(from), spec_(spec) {}

TransferSource::~TransferSource() = default;

Status TransferSource::checkTarget(const Layout& to) const {
  CHIMERA_RETURN_IF_ERROR(from_.validate(spec_));
  CHIMERA_RETURN_IF_ERROR(to.validate(spec_));
  const Mesh& mesh = from_.mesh();
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    const Placement& f = from_.placement(axis);
    const Placement& t = to.placement(axis);
    CHIMERA_CHECK_ARG(!f.isPartial() || (t.isPartial() && t.op == f.op),
                      "cannot move partial data of layout {} into layout {}: reduce {} first", from_.toString(),
                      to.toString(), mesh.axis(axis).name);
    CHIMERA_CHECK_ARG(!t.isPartial() || f.isPartial(), "layout {} is not partial on {} like the target {}",
                      from_.toString(), mesh.axis(axis).name, to.toString());
  }
  return Status::ok();
}

Status TransferSource::transfersTo(const Layout& to, std::vector<BoxTransfer>& out) {
  std::vector<TransferFlow> flows;
  return transfersTo(to, kWorldPlan, out, flows);
}

Status TransferSource::transfersTo(const Layout& to, int rank, std::vector<BoxTransfer>& transfers,
                                   std::vector<TransferFlow>& flows) {
  CHIMERA_RETURN_IF_ERROR(checkTarget(to));
  if (!index_) index_ = std::make_unique<Index>(from_, spec_);
  const Mesh& mesh = from_.mesh();
  CHIMERA_CHECK_ARG(rank == kWorldPlan || (rank >= 0 && rank < mesh.size()), "rank {} outside the mesh {} of {} ranks",
                    rank, mesh.toString(), mesh.size());
  const std::vector<std::int64_t> needExtent = to.localShape(spec_);
  const std::vector<std::int64_t> needOffsets = rankOffsets(to, spec_);
  const auto dims = static_cast<std::size_t>(spec_.rank());
  std::vector<BoxTransfer> built;
  std::vector<TransferFlow> all;
  for (int dst = 0; dst < mesh.size(); ++dst) {
    if (!to.holds(dst)) continue;
    CHIMERA_RETURN_IF_ERROR(index_->deliver(dst, needOffsets.data() + static_cast<std::size_t>(dst) * dims,
                                            needExtent.data(), rank, built, all));
  }
  transfers = std::move(built);
  flows = std::move(all);
  return Status::ok();
}

Status TransferSource::countTransfers(const Layout& to, std::int64_t& out) const {
  CHIMERA_RETURN_IF_ERROR(checkTarget(to));
  // deliver() emits one transfer per cell of `from` that a destination's box overlaps.
  const Mesh& mesh = from_.mesh();
  const std::vector<std::int64_t> extent = from_.localShape(spec_);
  const std::vector<std::int64_t> needExtent = to.localShape(spec_);
  const std::vector<std::int64_t> needOffsets = rankOffsets(to, spec_);
  const auto dims = static_cast<std::size_t>(spec_.rank());
  std::int64_t count = 0;
  for (int dst = 0; dst < mesh.size(); ++dst) {
    if (!to.holds(dst)) continue;
    std::int64_t cells = 1;
    for (std::size_t d = 0; d < dims; ++d) {
      const std::int64_t offset = needOffsets[static_cast<std::size_t>(dst) * dims + d];
      cells *= (offset + needExtent[d] + extent[d] - 1) / extent[d] - offset / extent[d];
    }
    count += cells;
  }
  out = count;
  return Status::ok();
}

Status TransferSource::isLocal(const Layout& to, bool& out) const {
  CHIMERA_RETURN_IF_ERROR(checkTarget(to));
  // transfersTo sends a piece from another rank exactly when the destination does not hold
  // the cell of `from` that piece lies in; a rank holds one cell, so all is local when each
  // destination's box lies inside its own box of `from`.
  const Mesh& mesh = from_.mesh();
  const std::vector<std::int64_t> haveExtent = from_.localShape(spec_);
  const std::vector<std::int64_t> haveOffsets = rankOffsets(from_, spec_);
  const std::vector<std::int64_t> needExtent = to.localShape(spec_);
  const std::vector<std::int64_t> needOffsets = rankOffsets(to, spec_);
  const auto dims = static_cast<std::size_t>(spec_.rank());
  out = false;
  for (int dst = 0; dst < mesh.size(); ++dst) {
    if (!to.holds(dst)) continue;
    if (!from_.holds(dst)) return Status::ok();
    for (std::size_t d = 0; d < dims; ++d) {
      const std::size_t i = static_cast<std::size_t>(dst) * dims + d;
      if (needOffsets[i] < haveOffsets[i] || needOffsets[i] + needExtent[d] > haveOffsets[i] + haveExtent[d]) {
        return Status::ok();
      }
    }
  }
  out = true;
  return Status::ok();
}

Status manyToManyTransfers(const Layout& from, const Layout& to, const TensorSpec& spec,
                           std::vector<BoxTransfer>& out) {
  TransferSource source(from, spec);
  return source.transfersTo(to, out);
}

AxisSet allToAllGroup(const Layout& from, const Layout& to, const std::vector<TransferFlow>& flows) {
  const Mesh& mesh = from.mesh();
  if (flows.empty()) return {};
  const std::int64_t block = flows.front().bytes;
  for (const auto& t : flows) {
    if (t.bytes != block) return {};
  }
  std::size_t holders = 0;
  for (int rank = 0; rank < mesh.size(); ++rank) {
    const bool holds = from.holds(rank);
    if (holds != to.holds(rank)) return {};
    holders += holds ? 1 : 0;
  }
  // The transfer count must be holders * n: only groups of that size n can match. Of those,
  // the first in axis-bit order wins (the smallest group, ties broken by bits).
  if (holders == 0 || flows.size() % holders != 0) return {};
  const std::size_t n = flows.size() / holders;
  if (n < 2) return {};
  std::vector<std::uint8_t> seen;  // [(src, member index of dst)] seen once each
  for (std::uint32_t bits = 1; bits <= mesh.allAxes().bits(); ++bits) {
    const AxisSet group = AxisSet::fromBits(bits);
    if (static_cast<std::size_t>(mesh.groupSize(group)) != n) continue;
    seen.assign(static_cast<std::size_t>(mesh.size()) * n, 0);
    bool ok = true;
    for (const auto& t : flows) {
      if (mesh.groupColor(t.src, group) != mesh.groupColor(t.dst, group)) {
        ok = false;
        break;
      }
      auto& mark = seen[static_cast<std::size_t>(t.src) * n + static_cast<std::size_t>(mesh.groupIndex(t.dst, group))];
      if (mark != 0) {
        ok = false;
        break;
      }
      mark = 1;
    }
    if (ok) return group;
  }
  return {};
}

namespace {

// True when every axis of `axes` is placed as `wanted` says in `layout`.
template <typename Wanted>
bool everyAxis(const Layout& layout, AxisSet axes, Wanted wanted) {
  for (int axis = 0; axis < layout.mesh().numAxes(); ++axis) {
    if (axes.contains(axis) && !wanted(layout.placement(axis))) return false;
  }
  return true;
}

}  // namespace

std::vector<ChainOp> collectivesBetween(const Layout& from, const Layout& to, const TensorSpec& spec) {
  const Mesh& mesh = from.mesh();
  std::vector<ChainOp> found;
  const auto tryOp = [&](const ChainOp& op) {
    OpEffect effect;
    if (applyChainOp(from, op, spec, effect).isOk() && effect.output == to && effect.scale == 1) found.push_back(op);
  };
  // Cheap necessary conditions on the placements first: applyChainOp stays the judge, but it
  // formats an error message for every candidate it rejects, which dominated cold planning.
  const auto shardOf = [](int dim) { return [dim](const Placement& p) { return p.isShard() && p.dim == dim; }; };
  const auto replicated = [](const Placement& p) { return p.isReplicate(); };
  const std::uint32_t all = mesh.allAxes().bits();
  for (std::uint32_t bits = 1; bits <= all; ++bits) {
    const AxisSet axes = AxisSet::fromBits(bits);
    for (int d = 0; d < spec.rank(); ++d) {
      if (!everyAxis(from, axes, shardOf(d))) continue;
      if (everyAxis(to, axes, replicated)) tryOp({ChainOp::Kind::AllGather, axes, d, 0, 0});
      for (int e = 0; e < spec.rank(); ++e) {
        if (e != d && everyAxis(to, axes, shardOf(e))) tryOp({ChainOp::Kind::AllToAll, axes, d, e, 0});
      }
    }
    if (everyAxis(from, axes, [](const Placement& p) { return p.isStage(); })) {
      tryOp({ChainOp::Kind::Send, axes, 0, 0, 0, 1});
      tryOp({ChainOp::Kind::Send, axes, 0, 0, 0, -1});
    }
    if (!everyAxis(to, axes, replicated)) continue;
    // Broadcast from the stage coordinates the tensor lives on (0 on replicated axes).
    int root = 0;
    for (int axis = 0; axis < mesh.numAxes(); ++axis) {
      if (!axes.contains(axis)) continue;
      const Placement& p = from.placement(axis);
      root = root * mesh.axis(axis).size + (p.isStage() ? p.stage : 0);
    }
    tryOp({ChainOp::Kind::Broadcast, axes, 0, 0, root});
  }
  return found;
}

PlanStep stepForChainOp(const ChainOp& op, const OpEffect& effect) {
  PlanStep step;
  step.axes = op.axes;
  step.op = effect.op;
  step.dim = op.dim;
  step.toDim = op.toDim;
  step.root = op.root;
  // A chain op is the plan step of the same kind, except the local slice.
  step.kind = op.kind == ChainOp::Kind::Slice ? PlanStep::Kind::LocalCopy : op.kind;
  return step;
}

}  // namespace chimera::detail
