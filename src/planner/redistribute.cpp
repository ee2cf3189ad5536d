// SPDX-License-Identifier: Apache-2.0
#include "planner/redistribute.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <unordered_map>

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
};

Grid gridOf(const Layout& layout, const TensorSpec& spec) {
  Grid grid;
  const auto local = layout.localShape(spec);
  for (std::size_t d = 0; d < spec.shape.size(); ++d) {
    grid.chunks.push_back(spec.shape[d] / local[d]);
    grid.chunkExtent.push_back(local[d]);
  }
  return grid;
}

int coordinateDistance(const std::vector<std::vector<int>>& coords, int a, int b) {
  int distance = 0;
  for (std::size_t i = 0; i < coords[static_cast<std::size_t>(a)].size(); ++i) {
    distance += coords[static_cast<std::size_t>(a)][i] != coords[static_cast<std::size_t>(b)][i] ? 1 : 0;
  }
  return distance;
}

// Appends the transfers delivering `need` (logical box of `dst`) from the holders of `from`.
struct TransferBuilder {
  const Layout& from;
  const TensorSpec& spec;
  Grid grid;
  AxisSet pinned;
  std::int64_t pinCount = 1;
  std::unordered_map<std::int64_t, std::vector<int>> holders;  // (cell, pin) -> ranks ascending
  std::vector<std::vector<int>> coords;
  std::vector<std::int64_t> load;
  std::vector<Box> fromBoxes;
  std::int64_t elementSize = 1;

  TransferBuilder(const Layout& f, const TensorSpec& s) : from(f), spec(s), grid(gridOf(f, s)) {
    const Mesh& mesh = from.mesh();
    pinned = from.axesOfKind(Placement::Kind::Partial);
    pinCount = mesh.groupSize(pinned);
    elementSize = static_cast<std::int64_t>(dataTypeSize(spec.dtype));
    load.assign(static_cast<std::size_t>(mesh.size()), 0);
    for (int rank = 0; rank < mesh.size(); ++rank) {
      coords.push_back(mesh.coordinates(rank));
      fromBoxes.push_back(from.rankBox(rank, spec));
      if (!from.holds(rank)) continue;
      holders[key(grid.cellOf(fromBoxes.back()), rank)].push_back(rank);
    }
  }

  std::int64_t key(std::int64_t cell, int rank) const {
    return cell * pinCount + from.mesh().groupIndex(rank, pinned);
  }

  int chooseSource(const std::vector<int>& candidates, int dst) const {
    int best = -1;
    for (int src : candidates) {
      if (src == dst) return dst;
      if (best < 0) {
        best = src;
        continue;
      }
      const int dSrc = coordinateDistance(coords, src, dst);
      const int dBest = coordinateDistance(coords, best, dst);
      if (dSrc < dBest || (dSrc == dBest && load[static_cast<std::size_t>(src)] < load[static_cast<std::size_t>(best)])) {
        best = src;
      }
    }
    return best;
  }

  Status deliver(int dst, const Box& need, std::vector<BoxTransfer>& out) {
    const std::size_t dims = grid.chunks.size();
    std::vector<std::int64_t> lo(dims), hi(dims), index(dims);
    for (std::size_t d = 0; d < dims; ++d) {
      lo[d] = need.offset[d] / grid.chunkExtent[d];
      hi[d] = (need.offset[d] + need.extent[d] + grid.chunkExtent[d] - 1) / grid.chunkExtent[d];
      index[d] = lo[d];
    }
    while (true) {
      Box cellBox;
      std::int64_t cell = 0;
      for (std::size_t d = 0; d < dims; ++d) {
        cellBox.offset.push_back(index[d] * grid.chunkExtent[d]);
        cellBox.extent.push_back(grid.chunkExtent[d]);
        cell = cell * grid.chunks[d] + index[d];
      }
      const auto found = holders.find(key(cell, dst));
      CHIMERA_CHECK_ARG(found != holders.end(), "no rank holding layout {} has box {} for rank {}", from.toString(),
                        cellBox.toString(), dst);
      const int src = chooseSource(found->second, dst);
      const Box piece = cellBox.intersect(need);
      BoxTransfer t{src, dst, piece.relativeTo(fromBoxes[static_cast<std::size_t>(src)].offset),
                    piece.relativeTo(need.offset), piece.volume() * elementSize};
      if (src != dst) load[static_cast<std::size_t>(src)] += t.bytes;
      out.push_back(std::move(t));
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
  const std::vector<int> holders = from.holders();
  if (transfers.empty() || holders != to.holders()) return {};
  const std::int64_t block = transfers.front().bytes;
  for (const auto& t : transfers) {
    if (t.bytes != block) return {};
  }
  // Candidate groups in increasing size; the transfer count must be holders * n.
  std::vector<std::uint32_t> sets;
  for (std::uint32_t bits = 1; bits <= mesh.allAxes().bits(); ++bits) sets.push_back(bits);
  std::stable_sort(sets.begin(), sets.end(), [&](std::uint32_t a, std::uint32_t b) {
    return mesh.groupSize(AxisSet::fromBits(a)) < mesh.groupSize(AxisSet::fromBits(b));
  });
  for (std::uint32_t bits : sets) {
    const AxisSet group = AxisSet::fromBits(bits);
    const int n = mesh.groupSize(group);
    if (n < 2 || transfers.size() != holders.size() * static_cast<std::size_t>(n)) continue;
    // pair[(src, member index of dst)] seen once each.
    std::vector<std::uint8_t> seen(static_cast<std::size_t>(mesh.size()) * static_cast<std::size_t>(n), 0);
    bool ok = true;
    for (const auto& t : transfers) {
      if (mesh.groupColor(t.src, group) != mesh.groupColor(t.dst, group)) {
        ok = false;
        break;
      }
      auto& mark = seen[static_cast<std::size_t>(t.src) * static_cast<std::size_t>(n) +
                        static_cast<std::size_t>(mesh.groupIndex(t.dst, group))];
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
