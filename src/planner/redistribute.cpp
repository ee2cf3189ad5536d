// SPDX-License-Identifier: Apache-2.0
#include "planner/redistribute.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.hpp"

namespace chimera::detail {
namespace {

// The grid of boxes `from` cuts the tensor into: per dim the number of chunks and their extent.
struct Grid {
  std::vector<std::int64_t> chunks;
  std::vector<std::int64_t> chunkExtent;

  std::int64_t cellOf(const Box& box) const {
    std::int64_t cell = 0;
    for (std::size_t d = 0; d < chunks.size(); ++d) cell = cell * chunks[d] + box.offset[d] / chunkExtent[d];
    return cell;
  }
  std::int64_t cells() const {
    std::int64_t n = 1;
    for (auto c : chunks) n *= c;
    return n;
  }
};

Grid gridOf(const Layout& layout, const TensorSpec& spec) {
  Grid grid;
  grid.chunkExtent = layout.localShape(spec);
  grid.chunks.reserve(spec.shape.size());
  for (std::size_t d = 0; d < spec.shape.size(); ++d) grid.chunks.push_back(spec.shape[d] / grid.chunkExtent[d]);
  return grid;
}

// Appends the transfers delivering `need` (logical box of `dst`) from the holders of `from`.
// Built once per (from, spec) and reused for every destination, so the per-transfer work
// allocates only the transfer's own two boxes.
struct TransferBuilder {
  const Layout& from;
  Grid grid;
  AxisSet pinned;
  std::int64_t pinCount = 1;
  int numAxes = 0;
  std::vector<int> coords;                // [rank * numAxes + axis]
  std::vector<int> pinIndex;              // rank -> group index on the pinned axes
  std::vector<std::int32_t> holderBegin;  // (cell, pin) key -> first entry in holderRanks
  std::vector<int> holderRanks;           // per key, the ranks holding it, ascending
  std::vector<std::int64_t> load;
  std::vector<Box> fromBoxes;
  std::int64_t elementSize = 1;
  std::vector<std::int64_t> lo, hi, index;  // deliver's scratch

  TransferBuilder(const Layout& f, const TensorSpec& spec) : from(f), grid(gridOf(f, spec)) {
    const Mesh& mesh = from.mesh();
    const int world = mesh.size();
    pinned = from.axesOfKind(Placement::Kind::Partial);
    pinCount = mesh.groupSize(pinned);
    numAxes = mesh.numAxes();
    elementSize = static_cast<std::int64_t>(dataTypeSize(spec.dtype));
    load.assign(static_cast<std::size_t>(world), 0);
    coords.resize(static_cast<std::size_t>(world) * static_cast<std::size_t>(numAxes));
    pinIndex.resize(static_cast<std::size_t>(world));
    fromBoxes.reserve(static_cast<std::size_t>(world));
    std::vector<std::int64_t> keyOf(static_cast<std::size_t>(world), -1);
    holderBegin.assign(static_cast<std::size_t>(grid.cells() * pinCount) + 1, 0);
    for (int rank = 0; rank < world; ++rank) {
      for (int axis = 0; axis < numAxes; ++axis) coords[flat(rank, axis)] = mesh.coordinate(rank, axis);
      pinIndex[static_cast<std::size_t>(rank)] = mesh.groupIndex(rank, pinned);
      fromBoxes.push_back(from.rankBox(rank, spec));
      if (!from.holds(rank)) continue;
      keyOf[static_cast<std::size_t>(rank)] = key(grid.cellOf(fromBoxes.back()), rank);
      ++holderBegin[static_cast<std::size_t>(keyOf[static_cast<std::size_t>(rank)]) + 1];
    }
    for (std::size_t k = 1; k < holderBegin.size(); ++k) holderBegin[k] += holderBegin[k - 1];
    holderRanks.resize(static_cast<std::size_t>(holderBegin.back()));
    std::vector<std::int32_t> next(holderBegin.begin(), holderBegin.end() - 1);
    for (int rank = 0; rank < world; ++rank) {
      const std::int64_t k = keyOf[static_cast<std::size_t>(rank)];
      if (k >= 0) holderRanks[static_cast<std::size_t>(next[static_cast<std::size_t>(k)]++)] = rank;
    }
    lo.resize(grid.chunks.size());
    hi.resize(grid.chunks.size());
    index.resize(grid.chunks.size());
  }

  std::size_t flat(int rank, int axis) const {
    return static_cast<std::size_t>(rank) * static_cast<std::size_t>(numAxes) + static_cast<std::size_t>(axis);
  }

  std::int64_t key(std::int64_t cell, int rank) const {
    return cell * pinCount + pinIndex[static_cast<std::size_t>(rank)];
  }

  int coordinateDistance(int a, int b) const {
    int distance = 0;
    for (int axis = 0; axis < numAxes; ++axis) distance += coords[flat(a, axis)] != coords[flat(b, axis)] ? 1 : 0;
    return distance;
  }

  // The holder of one key to send to `dst`: `dst` itself, else the nearest, then least loaded.
  int chooseSource(std::int64_t k, int dst) const {
    const auto begin = holderRanks.begin() + holderBegin[static_cast<std::size_t>(k)];
    const auto end = holderRanks.begin() + holderBegin[static_cast<std::size_t>(k) + 1];
    int best = -1;
    int dBest = 0;
    for (auto it = begin; it != end; ++it) {
      const int src = *it;
      if (src == dst) return dst;
      const int dSrc = coordinateDistance(src, dst);
      if (best < 0 || dSrc < dBest ||
          (dSrc == dBest && load[static_cast<std::size_t>(src)] < load[static_cast<std::size_t>(best)])) {
        best = src;
        dBest = dSrc;
      }
    }
    return best;
  }

  Box cellBox() const {
    Box box;
    for (std::size_t d = 0; d < index.size(); ++d) {
      box.offset.push_back(index[d] * grid.chunkExtent[d]);
      box.extent.push_back(grid.chunkExtent[d]);
    }
    return box;
  }

  // The transfer of the part of the current cell (`index`) that `need` overlaps, from `src`.
  BoxTransfer piece(int src, int dst, const Box& need) const {
    const std::size_t dims = index.size();
    const Box& source = fromBoxes[static_cast<std::size_t>(src)];
    BoxTransfer t{src, dst, {}, {}, elementSize};
    t.srcBox.offset.resize(dims);
    t.srcBox.extent.resize(dims);
    t.dstBox.offset.resize(dims);
    t.dstBox.extent.resize(dims);
    for (std::size_t d = 0; d < dims; ++d) {
      const std::int64_t cellLo = index[d] * grid.chunkExtent[d];
      const std::int64_t low = std::max(cellLo, need.offset[d]);
      const std::int64_t high = std::min(cellLo + grid.chunkExtent[d], need.offset[d] + need.extent[d]);
      const std::int64_t extent = std::max<std::int64_t>(0, high - low);
      t.srcBox.offset[d] = low - source.offset[d];
      t.dstBox.offset[d] = low - need.offset[d];
      t.srcBox.extent[d] = extent;
      t.dstBox.extent[d] = extent;
      t.bytes *= extent;
    }
    return t;
  }

  Status deliver(int dst, const Box& need, std::vector<BoxTransfer>& out) {
    const std::size_t dims = grid.chunks.size();
    for (std::size_t d = 0; d < dims; ++d) {
      lo[d] = need.offset[d] / grid.chunkExtent[d];
      hi[d] = (need.offset[d] + need.extent[d] + grid.chunkExtent[d] - 1) / grid.chunkExtent[d];
      index[d] = lo[d];
    }
    while (true) {
      std::int64_t cell = 0;
      for (std::size_t d = 0; d < dims; ++d) cell = cell * grid.chunks[d] + index[d];
      const std::int64_t k = key(cell, dst);
      CHIMERA_CHECK_ARG(holderBegin[static_cast<std::size_t>(k)] < holderBegin[static_cast<std::size_t>(k) + 1],
                        "no rank holding layout {} has box {} for rank {}", from.toString(), cellBox().toString(), dst);
      const int src = chooseSource(k, dst);
      out.push_back(piece(src, dst, need));
      if (src != dst) load[static_cast<std::size_t>(src)] += out.back().bytes;
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

}  // namespace

Status manyToManyTransfers(const Layout& from, const Layout& to, const TensorSpec& spec,
                           std::vector<BoxTransfer>& out) {
  CHIMERA_RETURN_IF_ERROR(from.validate(spec));
  CHIMERA_RETURN_IF_ERROR(to.validate(spec));
  const Mesh& mesh = from.mesh();
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    const Placement& f = from.placement(axis);
    const Placement& t = to.placement(axis);
    CHIMERA_CHECK_ARG(!f.isPartial() || (t.isPartial() && t.op == f.op),
                      "cannot move partial data of layout {} into layout {}: reduce {} first", from.toString(),
                      to.toString(), mesh.axis(axis).name);
    CHIMERA_CHECK_ARG(!t.isPartial() || f.isPartial(), "layout {} is not partial on {} like the target {}",
                      from.toString(), mesh.axis(axis).name, to.toString());
  }
  TransferBuilder builder(from, spec);
  std::vector<BoxTransfer> transfers;
  for (int dst : to.holders()) {
    CHIMERA_RETURN_IF_ERROR(builder.deliver(dst, to.rankBox(dst, spec), transfers));
  }
  out = std::move(transfers);
  return Status::ok();
}

AxisSet allToAllGroup(const Layout& from, const Layout& to, const std::vector<BoxTransfer>& transfers) {
  const Mesh& mesh = from.mesh();
  if (transfers.empty()) return {};
  const std::int64_t block = transfers.front().bytes;
  for (const auto& t : transfers) {
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
  if (holders == 0 || transfers.size() % holders != 0) return {};
  const std::size_t n = transfers.size() / holders;
  if (n < 2) return {};
  std::vector<std::uint8_t> seen;  // [(src, member index of dst)] seen once each
  for (std::uint32_t bits = 1; bits <= mesh.allAxes().bits(); ++bits) {
    const AxisSet group = AxisSet::fromBits(bits);
    if (static_cast<std::size_t>(mesh.groupSize(group)) != n) continue;
    seen.assign(static_cast<std::size_t>(mesh.size()) * n, 0);
    bool ok = true;
    for (const auto& t : transfers) {
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
      tryOp({ChainOp::Kind::Send, axes, 0, 0, 0});
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
  switch (op.kind) {
    case ChainOp::Kind::AllReduce:
      step.kind = PlanStep::Kind::AllReduce;
      break;
    case ChainOp::Kind::ReduceScatter:
      step.kind = PlanStep::Kind::ReduceScatter;
      break;
    case ChainOp::Kind::AllGather:
      step.kind = PlanStep::Kind::AllGather;
      break;
    case ChainOp::Kind::AllToAll:
      step.kind = PlanStep::Kind::AllToAll;
      break;
    case ChainOp::Kind::Slice:
      step.kind = PlanStep::Kind::LocalCopy;
      break;
    case ChainOp::Kind::Send:
      step.kind = PlanStep::Kind::Send;
      break;
    case ChainOp::Kind::Broadcast:
      step.kind = PlanStep::Kind::Broadcast;
      break;
  }
  return step;
}

}  // namespace chimera::detail
