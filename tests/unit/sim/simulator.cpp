// SPDX-License-Identifier: Apache-2.0
// Implements the N-rank in-process simulator, the planner tests' oracle (tests only).
#include "sim/simulator.hpp"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "common/hash.hpp"

namespace chimera::sim {
namespace {

using detail::splitmix64;

std::int64_t reduce(ReduceOp op, std::int64_t a, std::int64_t b) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return a + b;
    case ReduceOp::Prod: return a * b;
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
  }
  return a;
}

struct Context {
  const Mesh& mesh;
  std::int64_t elementSize;
  Traffic& traffic;

  void count(int rank, std::int64_t bytes) const { traffic.perRank[static_cast<std::size_t>(rank)] += bytes; }
  std::int64_t bytesOf(const LocalTensor& t) const { return t.numElements() * elementSize; }
};

const LocalTensor& at(const RankTensors& state, int rank) {
  const auto& t = state[static_cast<std::size_t>(rank)];
  if (!t) throw std::logic_error("rank " + std::to_string(rank) + " takes part but holds no buffer");
  return *t;
}

// Group members in group-index order, for every participating rank.
std::vector<int> members(const Mesh& mesh, int rank, AxisSet axes) { return mesh.groupRanks(rank, axes); }

LocalTensor reduced(const Context& c, const RankTensors& in, int rank, AxisSet axes, ReduceOp op) {
  const auto group = members(c.mesh, rank, axes);
  LocalTensor acc = at(in, group.front());
  for (std::size_t g = 1; g < group.size(); ++g) {
    const LocalTensor& other = at(in, group[g]);
    for (std::size_t i = 0; i < acc.data.size(); ++i) acc.data[i] = reduce(op, acc.data[i], other.data[i]);
  }
  if (op == ReduceOp::Avg) {
    for (auto& v : acc.data) v /= static_cast<std::int64_t>(group.size());
  }
  return acc;
}

RankTensors allReduce(const Context& c, const RankTensors& in, AxisSet axes, ReduceOp op) {
  RankTensors out(in.size());
  const std::int64_t n = c.mesh.groupSize(axes);
  for (int r = 0; r < c.mesh.size(); ++r) {
    if (!in[static_cast<std::size_t>(r)]) continue;
    out[static_cast<std::size_t>(r)] = reduced(c, in, r, axes, op);
    c.count(r, 2 * (n - 1) * c.bytesOf(at(in, r)) / n);
  }
  return out;
}

RankTensors reduceScatter(const Context& c, const RankTensors& in, AxisSet axes, ReduceOp op, int dim) {
  RankTensors out(in.size());
  const int n = c.mesh.groupSize(axes);
  for (int r = 0; r < c.mesh.size(); ++r) {
    if (!in[static_cast<std::size_t>(r)]) continue;
    out[static_cast<std::size_t>(r)] = chunk(reduced(c, in, r, axes, op), dim, n, c.mesh.groupIndex(r, axes));
    c.count(r, (n - 1) * c.bytesOf(at(in, r)) / n);
  }
  return out;
}

RankTensors allGather(const Context& c, const RankTensors& in, AxisSet axes, int dim) {
  RankTensors out(in.size());
  const int n = c.mesh.groupSize(axes);
  for (int r = 0; r < c.mesh.size(); ++r) {
    if (!in[static_cast<std::size_t>(r)]) continue;
    std::vector<LocalTensor> parts;
    for (int g : members(c.mesh, r, axes)) parts.push_back(at(in, g));
    out[static_cast<std::size_t>(r)] = concat(parts, dim);
    c.count(r, (n - 1) * c.bytesOf(at(in, r)));
  }
  return out;
}

RankTensors allToAll(const Context& c, const RankTensors& in, AxisSet axes, int fromDim, int toDim) {
  RankTensors out(in.size());
  const int n = c.mesh.groupSize(axes);
  for (int r = 0; r < c.mesh.size(); ++r) {
    if (!in[static_cast<std::size_t>(r)]) continue;
    const int self = c.mesh.groupIndex(r, axes);
    std::vector<LocalTensor> parts;
    for (int g : members(c.mesh, r, axes)) parts.push_back(chunk(at(in, g), toDim, n, self));
    out[static_cast<std::size_t>(r)] = concat(parts, fromDim);
    c.count(r, (n - 1) * c.bytesOf(at(in, r)) / n);
  }
  return out;
}

RankTensors slice(const Context& c, const RankTensors& in, AxisSet axes, int dim) {
  RankTensors out(in.size());
  const int n = c.mesh.groupSize(axes);
  for (int r = 0; r < c.mesh.size(); ++r) {
    if (!in[static_cast<std::size_t>(r)]) continue;
    out[static_cast<std::size_t>(r)] = chunk(at(in, r), dim, n, c.mesh.groupIndex(r, axes));
  }
  return out;
}

// Every holder sends to the rank `stageStep` stages along `axes` (one axis).
RankTensors send(const Context& c, const RankTensors& in, AxisSet axes, int stageStep) {
  RankTensors out(in.size());
  for (int r = 0; r < c.mesh.size(); ++r) {
    if (!in[static_cast<std::size_t>(r)]) continue;
    auto coords = c.mesh.coordinates(r);
    for (int axis = 0; axis < c.mesh.numAxes(); ++axis) {
      if (!axes.contains(axis)) continue;
      int& coord = coords[static_cast<std::size_t>(axis)];
      coord += stageStep;
      if (coord < 0 || coord >= c.mesh.axis(axis).size) throw std::logic_error("send past the first or last stage");
    }
    const int peer = c.mesh.rankOf(coords);
    if (out[static_cast<std::size_t>(peer)]) throw std::logic_error("two senders for one receiver");
    out[static_cast<std::size_t>(peer)] = at(in, r);
    c.count(r, c.bytesOf(at(in, r)));
  }
  return out;
}

RankTensors broadcast(const Context& c, const RankTensors& in, AxisSet axes, int root) {
  RankTensors out(in.size());
  const int n = c.mesh.groupSize(axes);
  for (int r = 0; r < c.mesh.size(); ++r) {
    const int rootRank = c.mesh.groupPeer(r, axes, root);
    if (!in[static_cast<std::size_t>(rootRank)]) continue;
    out[static_cast<std::size_t>(r)] = at(in, rootRank);
    // Pipelined broadcast: every member forwards the buffer except the last from the root.
    if ((c.mesh.groupIndex(r, axes) + n - root) % n != n - 1) c.count(r, c.bytesOf(at(in, rootRank)));
  }
  return out;
}

RankTensors runOp(const Context& c, const ChainOp& op, ReduceOp reduceOp, const RankTensors& in) {
  switch (op.kind) {
    case ChainOp::Kind::AllReduce: return allReduce(c, in, op.axes, reduceOp);
    case ChainOp::Kind::ReduceScatter: return reduceScatter(c, in, op.axes, reduceOp, op.dim);
    case ChainOp::Kind::AllGather: return allGather(c, in, op.axes, op.dim);
    case ChainOp::Kind::AllToAll: return allToAll(c, in, op.axes, op.dim, op.toDim);
    case ChainOp::Kind::Slice: return slice(c, in, op.axes, op.dim);
    case ChainOp::Kind::Send: return send(c, in, op.axes, op.stageStep);
    case ChainOp::Kind::Broadcast: return broadcast(c, in, op.axes, op.root);
    default: break;
  }
  throw std::logic_error(std::string(opKindName(op.kind)) + " is not a chain op");
}

RankTensors copyBoxes(const Layout& inLayout, const Layout& outLayout, const TensorSpec& spec, const RankTensors& in) {
  RankTensors out(in.size());
  for (int r = 0; r < static_cast<int>(in.size()); ++r) {
    if (!simHolds(outLayout, r)) continue;
    const Box want = simBox(outLayout, spec, r);
    const Box have = simBox(inLayout, spec, r);
    out[static_cast<std::size_t>(r)] = extract(at(in, r), want.relativeTo(have.offset));
  }
  return out;
}

}  // namespace

std::int64_t Traffic::total() const {
  std::int64_t t = 0;
  for (auto b : perRank) t += b;
  return t;
}

std::int64_t Traffic::maxPerRank() const {
  return perRank.empty() ? 0 : *std::max_element(perRank.begin(), perRank.end());
}

bool simHolds(const Layout& layout, int rank) {
  const Mesh& mesh = layout.mesh();
  const auto coords = mesh.coordinates(rank);
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    const Placement& p = layout.placement(axis);
    if (p.isStage() && coords[static_cast<std::size_t>(axis)] != p.stage) return false;
  }
  return true;
}

Box simBox(const Layout& layout, const TensorSpec& spec, int rank) {
  const Mesh& mesh = layout.mesh();
  const auto coords = mesh.coordinates(rank);
  Box box;
  for (int dim = 0; dim < spec.rank(); ++dim) {
    // Walk the splits outer to inner, narrowing [lo, lo + extent).
    std::int64_t lo = 0;
    std::int64_t extent = spec.shape[static_cast<std::size_t>(dim)];
    for (int axis : layout.splitAxes(dim)) {
      extent /= mesh.axis(axis).size;
      lo += extent * coords[static_cast<std::size_t>(axis)];
    }
    box.offset.push_back(lo);
    box.extent.push_back(extent);
  }
  return box;
}

RankTensors distribute(const Layout& layout, const TensorSpec& spec, std::uint64_t seed) {
  const Mesh& mesh = layout.mesh();
  RankTensors out(static_cast<std::size_t>(mesh.size()));
  for (int r = 0; r < mesh.size(); ++r) {
    if (!simHolds(layout, r)) continue;
    const auto coords = mesh.coordinates(r);
    std::uint64_t partialKey = 0;
    for (int axis = 0; axis < mesh.numAxes(); ++axis) {
      if (layout.placement(axis).isPartial())
        partialKey = partialKey * 131 + static_cast<std::uint64_t>(coords[static_cast<std::size_t>(axis)]) + 1;
    }
    const Box box = simBox(layout, spec, r);
    LocalTensor t = LocalTensor::filled(box.extent, 0);
    // Logical row-major index of each local element.
    for (std::int64_t i = 0; i < t.numElements(); ++i) {
      std::int64_t rest = i;
      std::int64_t logical = 0;
      std::int64_t stride = 1;
      for (int d = spec.rank() - 1; d >= 0; --d) {
        const auto du = static_cast<std::size_t>(d);
        const std::int64_t local = rest % box.extent[du];
        rest /= box.extent[du];
        logical += (box.offset[du] + local) * stride;
        stride *= spec.shape[du];
      }
      const std::uint64_t h =
          splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(logical) ^ splitmix64(partialKey)));
      t.data[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(h % (1u << 21)) - (1 << 20);
    }
    out[static_cast<std::size_t>(r)] = std::move(t);
  }
  return out;
}

RankTensors runChain(const ChainTrace& trace, const TensorSpec& spec, const RankTensors& input, Traffic& traffic) {
  const Mesh& mesh = trace.layouts.front().mesh();
  traffic.perRank.assign(static_cast<std::size_t>(mesh.size()), 0);
  const Context c{mesh, static_cast<std::int64_t>(dataTypeSize(spec.dtype)), traffic};
  RankTensors state = input;
  for (std::size_t i = 0; i < trace.ops.size(); ++i) state = runOp(c, trace.ops[i], trace.effects[i].op, state);
  return state;
}

RankTensors consume(const RankTensors& final, const Layout& finalLayout, const Layout& consumed,
                    const TensorSpec& spec) {
  return copyBoxes(finalLayout, consumed, spec, final);
}

namespace {

RankTensors runManyToMany(const Plan& plan, const PlanStep& step, const RankTensors& in, const Context& c) {
  const PlanBuffer& outBuffer = plan.buffers[static_cast<std::size_t>(step.output)];
  RankTensors out(in.size());
  for (int r = 0; r < c.mesh.size(); ++r) {
    if (simHolds(outBuffer.layout, r))
      out[static_cast<std::size_t>(r)] = LocalTensor::filled(outBuffer.localShape, kUnwritten);
  }
  for (const auto& t : step.transfers) {
    const LocalTensor piece = extract(at(in, t.src), t.srcBox);
    auto& dst = out[static_cast<std::size_t>(t.dst)];
    if (!dst) throw std::logic_error("transfer to rank " + std::to_string(t.dst) + " that holds no output");
    insert(*dst, t.dstBox, piece);
    if (t.src != t.dst) c.count(t.src, piece.numElements() * c.elementSize);
  }
  return out;
}

RankTensors runStep(const Plan& plan, const PlanStep& step, const RankTensors& in, const Context& c) {
  const Layout& inLayout = plan.buffers[static_cast<std::size_t>(step.input)].layout;
  const Layout& outLayout = plan.buffers[static_cast<std::size_t>(step.output)].layout;
  switch (step.kind) {
    case PlanStep::Kind::AllReduce: return allReduce(c, in, step.axes, step.op);
    case PlanStep::Kind::ReduceScatter: return reduceScatter(c, in, step.axes, step.op, step.dim);
    case PlanStep::Kind::AllGather: return allGather(c, in, step.axes, step.dim);
    case PlanStep::Kind::AllToAll: return allToAll(c, in, step.axes, step.dim, step.toDim);
    case PlanStep::Kind::Broadcast: return broadcast(c, in, step.axes, step.root);
    case PlanStep::Kind::Send: {
      const int axis = std::countr_zero(step.axes.bits());
      return send(c, in, step.axes, outLayout.placement(axis).stage - inLayout.placement(axis).stage);
    }
    case PlanStep::Kind::ManyToMany: return runManyToMany(plan, step, in, c);
    case PlanStep::Kind::LocalCopy: return copyBoxes(inLayout, outLayout, plan.spec, in);
    case PlanStep::Kind::Scale: {
      RankTensors out = in;
      for (auto& t : out) {
        if (t) {
          for (auto& v : t->data) v *= step.scale;
        }
      }
      return out;
    }
    default: break;
  }
  throw std::logic_error(std::string(opKindName(step.kind)) + " is not a plan step");
}

}  // namespace

RankTensors runPlan(const Plan& plan, const RankTensors& input, Traffic& traffic) {
  const Mesh& mesh = plan.buffers.front().layout.mesh();
  traffic.perRank.assign(static_cast<std::size_t>(mesh.size()), 0);
  const Context c{mesh, static_cast<std::int64_t>(dataTypeSize(plan.spec.dtype)), traffic};
  std::vector<RankTensors> buffers(plan.buffers.size());
  buffers[Plan::kInput] = input;
  for (std::size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& step = plan.steps[s];
    RankTensors out = runStep(plan, step, buffers[static_cast<std::size_t>(step.input)], c);
    const PlanBuffer& buffer = plan.buffers[static_cast<std::size_t>(step.output)];
    for (int r = 0; r < mesh.size(); ++r) {
      const auto& t = out[static_cast<std::size_t>(r)];
      const std::string where = "step " + std::to_string(s + 1) + " rank " + std::to_string(r);
      if (t.has_value() != simHolds(buffer.layout, r))
        throw std::logic_error(where + ": buffer presence differs from its layout");
      if (!t) continue;
      if (t->shape != buffer.localShape) throw std::logic_error(where + ": wrong local shape");
      if (std::find(t->data.begin(), t->data.end(), kUnwritten) != t->data.end()) {
        throw std::logic_error(where + ": output element left unwritten");
      }
    }
    buffers[static_cast<std::size_t>(step.output)] = std::move(out);
  }
  return buffers[Plan::kOutput];
}

}  // namespace chimera::sim
