// SPDX-License-Identifier: Apache-2.0
// Implements Plan and PlanStep: their text form and byte counts.
#include "chimera/planning/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "core/check.hpp"
#include "planner/byte_formulas.hpp"

namespace chimera {

std::string_view planStepKindName(PlanStep::Kind kind) { return opKindName(kind); }

std::string planStepText(const Plan& plan, const PlanStep& step) {
  const Mesh& mesh = plan.buffers[static_cast<std::size_t>(step.input)].layout.mesh();
  const std::string group = mesh.axesName(step.axes);
  switch (step.kind) {
    case PlanStep::Kind::AllReduce: return fmt::format("allreduce:{}", group);
    case PlanStep::Kind::ReduceScatter: return fmt::format("reducescatter:{}:{}", group, step.dim);
    case PlanStep::Kind::AllGather: return fmt::format("allgather:{}:{}", group, step.dim);
    case PlanStep::Kind::AllToAll: return fmt::format("alltoall:{}:{}:{}", group, step.dim, step.toDim);
    case PlanStep::Kind::Broadcast: return fmt::format("broadcast:{}:{}", group, step.root);
    case PlanStep::Kind::Send: return fmt::format("send:{}", group);
    case PlanStep::Kind::ManyToMany: {
      const auto remote =
          std::count_if(step.flows.begin(), step.flows.end(), [](const TransferFlow& f) { return f.src != f.dst; });
      if (step.allToAllGroup.empty()) return fmt::format("manytomany({} transfers)", remote);
      return fmt::format("manytomany({} transfers, an alltoall over {})", remote, mesh.axesName(step.allToAllGroup));
    }
    case PlanStep::Kind::LocalCopy: return "localcopy";
    case PlanStep::Kind::Scale: return fmt::format("scale:{}", step.scale);
    default:  // Slice: not a plan step
      break;
  }
  return std::string(opKindName(step.kind));
}

int Plan::addBuffer(const Layout& layout) {
  PlanBuffer buffer{layout, layout.localShape(spec), static_cast<std::int64_t>(dataTypeSize(spec.dtype))};
  for (auto e : buffer.localShape) buffer.localBytes *= e;  // = layout.localBytes(spec), one shape less
  buffers.push_back(std::move(buffer));
  return static_cast<int>(buffers.size()) - 1;
}

Box Plan::localCopySource(const PlanStep& step, int onRank) const {
  CHIMERA_ASSERT(step.kind == PlanStep::Kind::LocalCopy);
  const Box in = buffers[static_cast<std::size_t>(step.input)].layout.rankBox(onRank, spec);
  const Box out = buffers[static_cast<std::size_t>(step.output)].layout.rankBox(onRank, spec);
  return out.relativeTo(in.offset);
}

std::string Plan::toString() const {
  std::string text;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    text += fmt::format("  {}. {:<36} buf{} {} -> buf{} {}", i + 1, planStepText(*this, s), s.input,
                        buffers[static_cast<std::size_t>(s.input)].layout.toString(), s.output,
                        buffers[static_cast<std::size_t>(s.output)].layout.toString());
    if (!s.origin.empty()) text += fmt::format("   [{}]", s.origin);
    text += '\n';
  }
  if (steps.empty()) text += "  (nothing to do: the input already is the output)\n";
  return text;
}

namespace detail {

void addStepBytes(const Plan& plan, const PlanStep& step, std::vector<std::int64_t>& perRank) {
  const Layout& in = plan.buffers[static_cast<std::size_t>(step.input)].layout;
  const Mesh& mesh = in.mesh();
  const std::int64_t L = plan.buffers[static_cast<std::size_t>(step.input)].localBytes;
  const std::int64_t n = mesh.groupSize(step.axes);
  for (int rank = 0; rank < mesh.size(); ++rank) {
    auto& b = perRank[static_cast<std::size_t>(rank)];
    if (step.kind == PlanStep::Kind::Broadcast) {
      // Pipelined broadcast from the root: every member forwards L except the last one,
      // whether or not it held the input (a stage broadcast fills the other stages).
      const bool rootHolds = in.holds(mesh.groupPeer(rank, step.axes, step.root));
      const bool last = (mesh.groupIndex(rank, step.axes) + n - step.root) % n == n - 1;
      b += rootHolds && !last ? L : 0;
      continue;
    }
    if (!in.holds(rank)) continue;
    switch (step.kind) {
      case PlanStep::Kind::AllReduce: b += allReduceBytes(L, n); break;
      case PlanStep::Kind::ReduceScatter: b += reduceScatterBytes(L, n); break;
      case PlanStep::Kind::AllGather: b += allGatherBytes(L, n); break;
      case PlanStep::Kind::AllToAll: b += allToAllBytes(L, n); break;
      case PlanStep::Kind::Broadcast:
      case PlanStep::Kind::Send: b += L; break;
      default:  // ManyToMany (below), LocalCopy, Scale: no collective bytes
        break;
    }
  }
  if (step.kind == PlanStep::Kind::ManyToMany) {
    for (const auto& f : step.flows) {
      if (f.src != f.dst) perRank[static_cast<std::size_t>(f.src)] += f.bytes;
    }
  }
}

}  // namespace detail

std::vector<std::int64_t> stepBytesPerRank(const Plan& plan, const PlanStep& step) {
  const Mesh& mesh = plan.buffers[static_cast<std::size_t>(step.input)].layout.mesh();
  std::vector<std::int64_t> bytes(static_cast<std::size_t>(mesh.size()), 0);
  detail::addStepBytes(plan, step, bytes);
  return bytes;
}

PlanBytes planBytes(const Plan& plan) {
  PlanBytes out;
  const int world = plan.buffers.front().layout.mesh().size();
  out.perRank.assign(static_cast<std::size_t>(world), 0);
  for (const auto& step : plan.steps) {
    auto bytes = stepBytesPerRank(plan, step);
    for (int r = 0; r < world; ++r) out.perRank[static_cast<std::size_t>(r)] += bytes[static_cast<std::size_t>(r)];
    if (step.kind == PlanStep::Kind::ManyToMany) {
      for (const auto& f : step.flows) out.messages += f.src != f.dst ? 1 : 0;
    }
    out.stepPerRank.push_back(std::move(bytes));
  }
  for (auto b : out.perRank) {
    out.total += b;
    out.maxPerRank = std::max(out.maxPerRank, b);
  }
  return out;
}

namespace {

// True when the dims before `dim` of `shape` are all 1: blocks of `dim` are contiguous runs.
bool blocksContiguous(const std::vector<std::int64_t>& shape, int dim) {
  for (int d = 0; d < dim && d < static_cast<int>(shape.size()); ++d) {
    if (shape[static_cast<std::size_t>(d)] != 1) return false;
  }
  return true;
}

}  // namespace

TransferPasses transferPasses(std::int64_t bytes, std::int64_t srcRunBytes, std::int64_t dstRunBytes, bool movesBoxes) {
  const bool srcOneRun = srcRunBytes >= bytes;
  const bool dstOneRun = dstRunBytes >= bytes;
  const bool packSource = !srcOneRun && srcRunBytes < kMinReadRunBytes;
  const bool unpackTarget = !dstOneRun && dstRunBytes < kMinReadRunBytes;
  // A box that is one run on both sides once the short-run sides are packed goes as a plain
  // transfer: reading it would only add the address and the answer.
  const bool plain = (srcOneRun || packSource) && (dstOneRun || unpackTarget);
  if (movesBoxes && !plain && bytes >= kMinMovedBoxBytes) return {true, packSource, unpackTarget};
  return {false, !srcOneRun, !dstOneRun};
}

LocalWork stepLocalWork(const Plan& plan, const PlanStep& step, bool movesBoxes) {
  LocalWork work;
  const PlanBuffer& input = plan.buffers[static_cast<std::size_t>(step.input)];
  const PlanBuffer& output = plan.buffers[static_cast<std::size_t>(step.output)];
  const auto inBytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, input.localBytes));
  const auto outBytes = static_cast<std::uint64_t>(std::max<std::int64_t>(0, output.localBytes));
  // The collectives' and local steps' passes run on every holder at once.
  const auto pass = [&](std::uint64_t bytes) {
    work.bytes += bytes;
    work.launches += 1;
    work.ranks = static_cast<int>(output.layout.holders().size());
  };
  switch (step.kind) {
    case PlanStep::Kind::ReduceScatter:
      if (!blocksContiguous(input.localShape, step.dim)) pass(inBytes);
      break;
    case PlanStep::Kind::AllGather:
      if (!blocksContiguous(output.localShape, step.dim)) pass(outBytes);
      break;
    case PlanStep::Kind::AllToAll:
      if (!blocksContiguous(input.localShape, step.toDim)) pass(inBytes);
      if (!blocksContiguous(output.localShape, step.dim)) pass(outBytes);
      break;
    case PlanStep::Kind::ManyToMany: {
      // Per rank: boxes that are not one run are packed (sender) or unpacked (receiver) unless
      // they move as boxes; transfers to itself are box copies. The boxes of one kind go in one
      // batched launch. A box read from the sender's memory costs its reader about a pass over a
      // page per run of the sender's box (kReadRunPassBytes).
      const Mesh& mesh = input.layout.mesh();
      enum : unsigned { kPack = 1, kUnpack = 2, kCopy = 4 };
      std::vector<std::uint64_t> bytes(static_cast<std::size_t>(mesh.size()), 0);
      std::vector<unsigned> kinds(static_cast<std::size_t>(mesh.size()), 0);
      const auto add = [&](int rank, std::uint64_t b, unsigned kind) {
        bytes[static_cast<std::size_t>(rank)] += b;
        kinds[static_cast<std::size_t>(rank)] |= kind;
      };
      for (const TransferFlow& f : step.flows) {
        const auto b = static_cast<std::uint64_t>(std::max<std::int64_t>(0, f.bytes));
        if (f.src == f.dst) {
          add(f.src, b, kCopy);
          continue;
        }
        const TransferPasses passes = transferPasses(f.bytes, f.srcRunBytes, f.dstRunBytes, movesBoxes);
        if (passes.pack) add(f.src, b, kPack);
        if (passes.unpack) add(f.dst, b, kUnpack);
        if (passes.movedAsBox) {
          const std::int64_t runs = passes.pack ? 1 : (f.bytes + f.srcRunBytes - 1) / f.srcRunBytes;
          add(f.dst, static_cast<std::uint64_t>(std::min(f.bytes, runs * kReadRunPassBytes)), 0);
        }
      }
      const auto busiest = static_cast<std::size_t>(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
      work.bytes += bytes[busiest];
      work.launches += std::popcount(kinds[busiest]);
      work.ranks = static_cast<int>(std::count_if(bytes.begin(), bytes.end(), [](std::uint64_t b) { return b > 0; }));
      break;
    }
    case PlanStep::Kind::LocalCopy:
    case PlanStep::Kind::Scale: pass(outBytes); break;
    default: break;  // AllReduce, Broadcast, Send: in place or contiguous
  }
  return work;
}

std::uint64_t planLocalBytes(const Plan& plan) {
  std::uint64_t bytes = 0;
  for (const PlanStep& step : plan.steps) bytes += stepLocalWork(plan, step).bytes;
  return bytes;
}

}  // namespace chimera
