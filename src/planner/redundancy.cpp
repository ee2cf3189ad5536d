// SPDX-License-Identifier: Apache-2.0
// Implements the redundancy analysis: bytes a chain moves that its consumer never reads.
#include "chimera/planning/redundancy.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "chimera/planning/planner.hpp"
#include "core/check.hpp"

namespace chimera {
namespace {

// Liveness over "atoms": the cells of the finest grid every layout of the chain aligns to.
class AtomGrid {
 public:
  AtomGrid(const std::vector<Layout>& layouts, const TensorSpec& spec) : spec_(spec) {
    atoms_.assign(spec.shape.size(), 1);
    for (const auto& layout : layouts) {
      const auto local = layout.localShape(spec);
      for (std::size_t d = 0; d < atoms_.size(); ++d) atoms_[d] = std::lcm(atoms_[d], spec.shape[d] / local[d]);
    }
    count_ = 1;
    for (auto a : atoms_) count_ *= a;
    atomBytes_ = spec.bytes() / count_;
  }
  std::int64_t count() const { return count_; }
  std::int64_t atomBytes() const { return atomBytes_; }

  // Mask of the atoms inside `box`.
  std::vector<std::uint8_t> mask(const Box& box) const {
    std::vector<std::uint8_t> m(static_cast<std::size_t>(count_), 0);
    if (box.empty()) return m;
    const std::size_t dims = atoms_.size();
    std::vector<std::int64_t> lo(dims), hi(dims), idx(dims);
    for (std::size_t d = 0; d < dims; ++d) {
      const std::int64_t ext = spec_.shape[d] / atoms_[d];
      lo[d] = box.offset[d] / ext;
      hi[d] = (box.offset[d] + box.extent[d]) / ext;
      idx[d] = lo[d];
    }
    while (true) {
      std::int64_t flat = 0;
      for (std::size_t d = 0; d < dims; ++d) flat = flat * atoms_[d] + idx[d];
      m[static_cast<std::size_t>(flat)] = 1;
      std::size_t d = dims;
      while (d > 0 && ++idx[d - 1] == hi[d - 1]) {
        idx[d - 1] = lo[d - 1];
        --d;
      }
      if (d == 0) break;
    }
    return m;
  }

 private:
  const TensorSpec& spec_;
  std::vector<std::int64_t> atoms_;
  std::int64_t count_ = 1;
  std::int64_t atomBytes_ = 0;
};

using Mask = std::vector<std::uint8_t>;

std::int64_t countAndNot(const Mask& a, const Mask& notB) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += (a[i] && !notB[i]) ? 1 : 0;
  return n;
}

struct OpLiveness {
  const AtomGrid& grid;
  const Mesh& mesh;
  const TensorSpec& spec;
  const Layout& in;
  const Layout& out;
  const ChainOp& op;

  // Returns live-before masks and adds the op's unconsumed bytes to `unconsumed`.
  std::vector<Mask> run(const std::vector<Mask>& after, std::int64_t& unconsumed) const {
    const int world = mesh.size();
    std::vector<Mask> before(static_cast<std::size_t>(world), Mask(static_cast<std::size_t>(grid.count()), 0));
    const std::int64_t n = mesh.groupSize(op.axes);
    std::int64_t deadAtoms = 0;
    struct GroupLive {
      Mask any;                    // some member reads the cell after the op
      std::vector<int> liveCount;  // members that read it
    };
    std::unordered_map<int, GroupLive> groupLive;  // by group color
    for (int s = 0; s < world; ++s) {
      if (!in.holds(s)) continue;
      const Mask inBox = grid.mask(in.rankBox(s, spec));
      const Mask outBox = grid.mask(out.rankBox(s, spec));
      auto& live = before[static_cast<std::size_t>(s)];
      switch (op.kind) {
        case ChainOp::Kind::Slice: live = after[static_cast<std::size_t>(s)]; break;
        case ChainOp::Kind::Send: {
          auto coords = mesh.coordinates(s);
          for (int axis = 0; axis < mesh.numAxes(); ++axis)
            coords[static_cast<std::size_t>(axis)] += op.axes.contains(axis) ? op.stageStep : 0;
          const int peer = mesh.rankOf(coords);
          live = after[static_cast<std::size_t>(peer)];
          const Mask peerBox = grid.mask(out.rankBox(peer, spec));
          deadAtoms += countAndNot(peerBox, after[static_cast<std::size_t>(peer)]);
          break;
        }
        default: {
          // What the group reads after the op, computed once per group (not per member:
          // that made a world-sized group cubic in its size).
          auto [entry, fresh] = groupLive.try_emplace(mesh.groupColor(s, op.axes));
          if (fresh) {
            entry->second.any.assign(static_cast<std::size_t>(grid.count()), 0);
            entry->second.liveCount.assign(static_cast<std::size_t>(grid.count()), 0);
            for (int g : mesh.groupRanks(s, op.axes)) {
              const auto& a = after[static_cast<std::size_t>(g)];
              for (std::size_t i = 0; i < a.size(); ++i) {
                entry->second.any[i] |= a[i];
                entry->second.liveCount[i] += a[i];
              }
            }
          }
          const Mask& any = entry->second.any;
          const std::vector<int>& liveCount = entry->second.liveCount;
          const bool isRoot = mesh.groupIndex(s, op.axes) == op.root;
          if (op.kind != ChainOp::Kind::Broadcast || isRoot) {
            for (std::size_t i = 0; i < live.size(); ++i) live[i] = inBox[i] && any[i];
          }
          const bool first = mesh.groupIndex(s, op.axes) == 0;
          deadAtoms += deadFor(inBox, outBox, after[static_cast<std::size_t>(s)], liveCount, n, isRoot, first);
        }
      }
    }
    unconsumed += deadAtoms * grid.atomBytes();
    return before;
  }

  // Dead atom-deliveries attributed to receiving rank `r` (see OpBytes::unconsumedTotal).
  // AllReduce counts each element's group-wide deliveries once, on the group's first member.
  std::int64_t deadFor(const Mask& inBox, const Mask& outBox, const Mask& liveAfter, const std::vector<int>& liveCount,
                       std::int64_t n, bool isRoot, bool first) const {
    std::int64_t dead = 0;
    for (std::size_t i = 0; i < outBox.size(); ++i) {
      switch (op.kind) {
        case ChainOp::Kind::AllGather:
        case ChainOp::Kind::AllToAll: dead += (outBox[i] && !inBox[i] && !liveAfter[i]) ? 1 : 0; break;
        case ChainOp::Kind::Broadcast: dead += (!isRoot && outBox[i] && !liveAfter[i]) ? 1 : 0; break;
        case ChainOp::Kind::ReduceScatter: dead += (outBox[i] && !liveAfter[i]) ? n - 1 : 0; break;
        case ChainOp::Kind::AllReduce: {
          if (!outBox[i] || !first) break;
          // Ring AllReduce = ReduceScatter + AllGather: the n-1 contributions are dead when
          // nobody reads the element, the n-1 deliveries beyond one reduced copy per reader.
          const std::int64_t c = liveCount[i];
          const std::int64_t groupDead = (c == 0 ? n - 1 : 0) + (n - 1) - std::max<std::int64_t>(0, c - 1);
          dead += groupDead;
          break;
        }
        default: break;
      }
    }
    return dead;
  }
};

}  // namespace

Status analyzeChain(const ChainTrace& trace, const Layout& consumed, const TensorSpec& spec, ChainAnalysis& out) {
  Plan baseline;
  CHIMERA_RETURN_IF_ERROR(baselinePlan(spec, trace, consumed, baseline));
  std::vector<Layout> layouts = trace.layouts;
  layouts.push_back(consumed);
  const AtomGrid grid(layouts, spec);
  const Mesh& mesh = consumed.mesh();
  ChainAnalysis analysis;
  analysis.unconsumedAnalysed = grid.count() <= (1LL << 22) && grid.count() * mesh.size() <= (1LL << 27);
  if (!analysis.unconsumedAnalysed) {
    for (std::size_t k = 0; k < trace.ops.size(); ++k) {
      OpBytes ob;
      ob.op = trace.ops[k].toString(mesh);
      ob.localBytes = trace.layouts[k].localBytes(spec);
      ob.groupSize = mesh.groupSize(trace.ops[k].axes);
      ob.participants = static_cast<int>(trace.layouts[k].holders().size());
      const auto bytes = stepBytesPerRank(baseline, baseline.steps[k]);
      ob.bytesTotal = std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0});
      ob.bytesPerRankMax = *std::max_element(bytes.begin(), bytes.end());
      analysis.ops.push_back(std::move(ob));
    }
    const PlanBytes total = planBytes(baseline);
    analysis.bytesTotal = total.total;
    analysis.bytesPerRankMax = total.maxPerRank;
    out = std::move(analysis);
    return Status::ok();
  }
  std::vector<Mask> live(static_cast<std::size_t>(mesh.size()));
  for (int r = 0; r < mesh.size(); ++r) live[static_cast<std::size_t>(r)] = grid.mask(consumed.rankBox(r, spec));
  analysis.ops.resize(trace.ops.size());
  for (std::size_t k = trace.ops.size(); k-- > 0;) {
    OpBytes& ob = analysis.ops[k];
    const Layout& in = trace.layouts[k];
    ob.op = trace.ops[k].toString(mesh);
    ob.localBytes = in.localBytes(spec);
    ob.groupSize = mesh.groupSize(trace.ops[k].axes);
    ob.participants = static_cast<int>(in.holders().size());
    const auto bytes = stepBytesPerRank(baseline, baseline.steps[k]);
    ob.bytesTotal = std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0});
    ob.bytesPerRankMax = *std::max_element(bytes.begin(), bytes.end());
    const OpLiveness step{grid, mesh, spec, in, trace.layouts[k + 1], trace.ops[k]};
    live = step.run(live, ob.unconsumedTotal);
    // The formulas round fractions down; on tiny buffers the exact count can exceed them.
    ob.unconsumedTotal = std::min(ob.unconsumedTotal, ob.bytesTotal);
  }
  const PlanBytes total = planBytes(baseline);
  analysis.bytesTotal = total.total;
  analysis.bytesPerRankMax = total.maxPerRank;
  for (const auto& ob : analysis.ops) analysis.unconsumedTotal += ob.unconsumedTotal;
  out = std::move(analysis);
  return Status::ok();
}

}  // namespace chimera
