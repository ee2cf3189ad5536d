// SPDX-License-Identifier: Apache-2.0
// Implements chains: parsing, and each op's effect on a layout (the layout algebra's ops).
#include "chimera/chain.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>

#include "core/check.hpp"
#include "core/checked_math.hpp"

namespace chimera {
namespace {

// Integer fields after AX in an op's text.
int numberFields(ChainOp::Kind kind) {
  switch (kind) {
    case ChainOp::Kind::AllToAll: return 2;
    case ChainOp::Kind::ReduceScatter:
    case ChainOp::Kind::AllGather:
    case ChainOp::Kind::Slice:
    case ChainOp::Kind::Broadcast: return 1;
    default:  // AllReduce, Send
      return 0;
  }
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

Status parseOp(std::string_view text, const Mesh& mesh, ChainOp& out) {
  std::vector<std::string_view> parts;
  std::string_view rest = text;
  while (true) {
    const auto colon = rest.find(':');
    parts.push_back(trim(rest.substr(0, colon)));
    if (colon == std::string_view::npos) break;
    rest = rest.substr(colon + 1);
  }
  ChainOp::Kind kind = ChainOp::Kind::AllReduce;
  CHIMERA_CHECK_ARG(findOpKind(parts[0], kOpInChain, kind), "unknown op '{}' in \"{}\" (expected {})", parts[0], text,
                    opKindKeywords(kOpInChain));
  const int fields = numberFields(kind);
  int stageStep = 1;
  if (kind == ChainOp::Kind::Send && parts.size() == 3) {
    CHIMERA_CHECK_ARG(parts[2] == "forward" || parts[2] == "backward",
                      "malformed op \"{}\": the direction of send is 'forward' or 'backward', not '{}'", text,
                      parts[2]);
    stageStep = parts[2] == "forward" ? 1 : -1;
    parts.pop_back();
  }
  CHIMERA_CHECK_ARG(static_cast<int>(parts.size()) == 2 + fields, "malformed op \"{}\": {} takes {} fields", text,
                    opKindName(kind),
                    kind == ChainOp::Kind::Send        ? std::string("AX[:forward|:backward]")
                    : fields == 0                      ? std::string("AX")
                    : kind == ChainOp::Kind::AllToAll  ? std::string("AX:FROMDIM:TODIM")
                    : kind == ChainOp::Kind::Broadcast ? std::string("AX:ROOT")
                                                       : std::string("AX:DIM"));
  ChainOp op;
  op.kind = kind;
  op.stageStep = stageStep;
  CHIMERA_RETURN_IF_ERROR(mesh.parseAxes(parts[1], op.axes));
  std::array<int, 2> numbers{0, 0};
  for (int i = 0; i < fields; ++i) {
    const auto field = parts[static_cast<std::size_t>(2 + i)];
    int& value = numbers[static_cast<std::size_t>(i)];
    const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    CHIMERA_CHECK_ARG(!field.empty() && ec == std::errc() && ptr == field.data() + field.size() && value >= 0,
                      "malformed number '{}' in op \"{}\"", field, text);
  }
  if (op.kind == ChainOp::Kind::Broadcast) {
    op.root = numbers[0];
  } else {
    op.dim = numbers[0];
    op.toDim = numbers[1];
  }
  out = op;
  return Status::ok();
}

// True when the innermost splits of `dim` are exactly the axes of `axes`, in mesh order.
bool innermostSplitsAre(const Layout& layout, int dim, AxisSet axes) {
  const auto split = layout.splitAxes(dim);
  std::vector<int> wanted;
  for (int axis = 0; axis < layout.mesh().numAxes(); ++axis) {
    if (axes.contains(axis)) wanted.push_back(axis);
  }
  if (split.size() < wanted.size()) return false;
  return std::equal(wanted.begin(), wanted.end(), split.end() - static_cast<std::ptrdiff_t>(wanted.size()));
}

Status checkDim(const ChainOp& op, int dim, const TensorSpec& spec, const Mesh& mesh) {
  CHIMERA_CHECK_ARG(dim < spec.rank(), "{} names dim {} but the tensor {} has {} dimensions", op.toString(mesh), dim,
                    spec.toString(), spec.rank());
  return Status::ok();
}

// Reductions: every axis of AX must be P (one op) or R; R axes under sum scale the values.
Status reductionEffect(const Layout& in, const ChainOp& op, OpEffect& effect) {
  const Mesh& mesh = in.mesh();
  std::int64_t replicated = 1;
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    if (!op.axes.contains(axis)) continue;
    const Placement& p = in.placement(axis);
    CHIMERA_CHECK_ARG(p.isPartial() || p.isReplicate(), "{} needs {} to be P or R, but the layout is {}",
                      op.toString(mesh), mesh.axis(axis).name, in.toString());
    if (p.isReplicate()) replicated *= mesh.axis(axis).size;
  }
  effect.op = in.partialOp();
  if (replicated > 1) {
    if (effect.op == ReduceOp::Prod) {
      return Status::unsupported(fmt::format("{}: a prod reduction over replicated axes (layout {}) is not supported",
                                             op.toString(mesh), in.toString()));
    }
    if (effect.op == ReduceOp::Sum) effect.scale = replicated;
  }
  return Status::ok();
}

Status checkNoStage(const Layout& in, const ChainOp& op) {
  const Mesh& mesh = in.mesh();
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    CHIMERA_CHECK_ARG(!(op.axes.contains(axis) && in.placement(axis).isStage()),
                      "{} runs over {}, but the tensor lives on stage {} of {} only (layout {})", op.toString(mesh),
                      mesh.axis(axis).name, in.placement(axis).stage, mesh.axis(axis).name, in.toString());
  }
  return Status::ok();
}

Status applySend(const Layout& in, const ChainOp& op, OpEffect& effect) {
  const Mesh& mesh = in.mesh();
  int axis = 0;
  while (axis < mesh.numAxes() && !op.axes.contains(axis)) ++axis;
  CHIMERA_CHECK_ARG(op.axes == AxisSet::single(axis), "{} names a group; send runs along one pipeline axis",
                    op.toString(mesh));
  const Placement& p = in.placement(axis);
  CHIMERA_CHECK_ARG(p.isStage(), "{} needs {} to be a stage placement @k, but the layout is {}", op.toString(mesh),
                    mesh.axis(axis).name, in.toString());
  CHIMERA_CHECK_ARG(op.stageStep == 1 || op.stageStep == -1, "{}: stage step {} (expected +1 or -1)", op.toString(mesh),
                    op.stageStep);
  const int target = p.stage + op.stageStep;
  CHIMERA_CHECK_ARG(target >= 0 && target<mesh.axis(axis).size, "{}: stage {} is the {} stage of {} (size {})",
                                          op.toString(mesh), p.stage, op.stageStep> 0
                        ? "last"
                        : "first",
                    mesh.axis(axis).name, mesh.axis(axis).size);
  effect.output = in.with(axis, Placement::onStage(target));
  return Status::ok();
}

Status applyBroadcast(const Layout& in, const ChainOp& op, OpEffect& effect) {
  const Mesh& mesh = in.mesh();
  const int n = mesh.groupSize(op.axes);
  CHIMERA_CHECK_ARG(op.root < n, "{}: root {} is out of range for a group of {} ranks", op.toString(mesh), op.root, n);
  int index = op.root;
  for (int axis = mesh.numAxes() - 1; axis >= 0; --axis) {
    if (!op.axes.contains(axis)) continue;
    const int coord = index % mesh.axis(axis).size;
    index /= mesh.axis(axis).size;
    const Placement& p = in.placement(axis);
    CHIMERA_CHECK_ARG(p.isReplicate() || (p.isStage() && p.stage == coord),
                      "{} needs {} to be R or @{} (the root's coordinate), but the layout is {}", op.toString(mesh),
                      mesh.axis(axis).name, coord, in.toString());
  }
  effect.output = in.withReplicated(op.axes);
  return Status::ok();
}

}  // namespace

std::string_view chainOpKindName(ChainOp::Kind kind) { return opKindName(kind); }

std::string ChainOp::toString(const Mesh& mesh) const {
  const std::string head = fmt::format("{}:{}", chainOpKindName(kind), mesh.axesName(axes));
  switch (kind) {
    case Kind::AllReduce: return head;
    case Kind::Send: return stageStep == 1 ? head : fmt::format("{}:backward", head);
    case Kind::ReduceScatter:
    case Kind::AllGather:
    case Kind::Slice: return fmt::format("{}:{}", head, dim);
    case Kind::AllToAll: return fmt::format("{}:{}:{}", head, dim, toDim);
    case Kind::Broadcast: return fmt::format("{}:{}", head, root);
    default:  // not a chain op (applyChainOp refuses it)
      break;
  }
  return head;
}

Status applyChainOp(const Layout& in, const ChainOp& op, const TensorSpec& spec, OpEffect& out) {
  const Mesh& mesh = in.mesh();
  CHIMERA_CHECK_ARG(!op.axes.empty(), "op has an empty axis group");
  OpEffect effect{in, ReduceOp::Sum, 1};
  if (op.kind != ChainOp::Kind::Send && op.kind != ChainOp::Kind::Broadcast) {
    CHIMERA_RETURN_IF_ERROR(checkNoStage(in, op));
  }
  switch (op.kind) {
    case ChainOp::Kind::AllReduce:
      CHIMERA_RETURN_IF_ERROR(reductionEffect(in, op, effect));
      effect.output = in.withReplicated(op.axes);
      break;
    case ChainOp::Kind::ReduceScatter:
      CHIMERA_RETURN_IF_ERROR(checkDim(op, op.dim, spec, mesh));
      CHIMERA_RETURN_IF_ERROR(reductionEffect(in, op, effect));
      effect.output = in.withShards(op.axes, op.dim);
      break;
    case ChainOp::Kind::AllGather:
      CHIMERA_RETURN_IF_ERROR(checkDim(op, op.dim, spec, mesh));
      CHIMERA_CHECK_ARG(innermostSplitsAre(in, op.dim, op.axes),
                        "{} needs {} to be the innermost split of dim {}, but the layout is {}", op.toString(mesh),
                        mesh.axesName(op.axes), op.dim, in.toString());
      effect.output = in.withReplicated(op.axes);
      break;
    case ChainOp::Kind::AllToAll:
      CHIMERA_RETURN_IF_ERROR(checkDim(op, op.dim, spec, mesh));
      CHIMERA_RETURN_IF_ERROR(checkDim(op, op.toDim, spec, mesh));
      CHIMERA_CHECK_ARG(op.dim != op.toDim, "{} moves a split from dim {} to itself", op.toString(mesh), op.dim);
      CHIMERA_CHECK_ARG(innermostSplitsAre(in, op.dim, op.axes),
                        "{} needs {} to be the innermost split of dim {}, but the layout is {}", op.toString(mesh),
                        mesh.axesName(op.axes), op.dim, in.toString());
      effect.output = in.withReplicated(op.axes).withShards(op.axes, op.toDim);
      break;
    case ChainOp::Kind::Slice:
      CHIMERA_RETURN_IF_ERROR(checkDim(op, op.dim, spec, mesh));
      for (int axis = 0; axis < mesh.numAxes(); ++axis) {
        CHIMERA_CHECK_ARG(!op.axes.contains(axis) || in.placement(axis).isReplicate(),
                          "{} needs {} to be R, but the layout is {}", op.toString(mesh), mesh.axis(axis).name,
                          in.toString());
      }
      effect.output = in.withShards(op.axes, op.dim);
      break;
    case ChainOp::Kind::Send: CHIMERA_RETURN_IF_ERROR(applySend(in, op, effect)); break;
    case ChainOp::Kind::Broadcast: CHIMERA_RETURN_IF_ERROR(applyBroadcast(in, op, effect)); break;
    default:
      return Status::invalidArgument(
          fmt::format("{} is not an op of a chain (expected {})", opKindName(op.kind), opKindKeywords(kOpInChain)));
  }
  Status fits = effect.output.validate(spec);
  if (!fits.isOk()) return Status::invalidArgument(fmt::format("{}: {}", op.toString(mesh), fits.message()));
  out = std::move(effect);
  return Status::ok();
}

Status Chain::parse(std::string_view text, const Mesh& mesh, Chain& out) {
  Chain chain;
  CHIMERA_CHECK_ARG(!trim(text).empty(), "empty chain (expected e.g. \"allreduce:tp,send:pp\")");
  std::string_view rest = text;
  while (true) {
    const auto comma = rest.find(',');
    ChainOp op;
    CHIMERA_RETURN_IF_ERROR(parseOp(trim(rest.substr(0, comma)), mesh, op));
    chain.ops.push_back(op);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  out = std::move(chain);
  return Status::ok();
}

std::string Chain::toString(const Mesh& mesh) const {
  std::string text;
  for (const auto& op : ops) {
    if (!text.empty()) text += ',';
    text += op.toString(mesh);
  }
  return text;
}

Status traceChain(const Layout& start, const Chain& chain, const TensorSpec& spec, ChainTrace& out) {
  CHIMERA_RETURN_IF_ERROR(start.validate(spec));
  ChainTrace trace;
  trace.ops = chain.ops;
  trace.layouts.push_back(start);
  trace.reduceOp = start.partialOp();
  for (std::size_t i = 0; i < chain.ops.size(); ++i) {
    OpEffect effect;
    Status status = applyChainOp(trace.layouts.back(), chain.ops[i], spec, effect);
    if (!status.isOk()) {
      return Status(status.code(),
                    fmt::format("op {} ({}): {}", i + 1, chain.ops[i].toString(start.mesh()), status.message()));
    }
    CHIMERA_CHECK_ARG(detail::checkedMul(trace.scale, effect.scale, trace.scale),
                      "op {} ({}): the chain scales the tensor by more than 2^63 (too many sums over replicated "
                      "axes)",
                      i + 1, chain.ops[i].toString(start.mesh()));
    trace.layouts.push_back(effect.output);
    trace.effects.push_back(std::move(effect));
  }
  out = std::move(trace);
  return Status::ok();
}

Status checkConsumable(const Layout& final, const Layout& consumed, const TensorSpec& spec) {
  CHIMERA_RETURN_IF_ERROR(consumed.validate(spec));
  const Mesh& mesh = final.mesh();
  CHIMERA_CHECK_ARG(mesh.axesEqual(consumed.mesh()), "consume layout is on mesh {}, the chain on {}",
                    consumed.mesh().toString(), mesh.toString());
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    const Placement& f = final.placement(axis);
    const Placement& c = consumed.placement(axis);
    CHIMERA_CHECK_ARG(f.isStage() == c.isStage() && (!f.isStage() || f.stage == c.stage),
                      "consume layout {} reads {} at {} but the chain leaves the tensor at {} (layout {})",
                      consumed.toString(), mesh.axis(axis).name, c.toString(), f.toString(), final.toString());
    CHIMERA_CHECK_ARG(f.isPartial() == c.isPartial() && (!f.isPartial() || f.op == c.op),
                      "consume layout {} has {} on {} but the chain leaves {} (layout {})", consumed.toString(),
                      c.toString(), mesh.axis(axis).name, f.toString(), final.toString());
  }
  for (int rank = 0; rank < mesh.size(); ++rank) {
    if (!consumed.holds(rank)) continue;
    const Box need = consumed.rankBox(rank, spec);
    const Box have = final.rankBox(rank, spec);
    CHIMERA_CHECK_ARG(have.contains(need),
                      "consume layout {} reads {} on rank {}, which holds only {} after the chain (layout {})",
                      consumed.toString(), need.toString(), rank, have.toString(), final.toString());
  }
  return Status::ok();
}

}  // namespace chimera
