// SPDX-License-Identifier: Apache-2.0
// Implements Layout: placements per axis, their text form, and each rank's box of a tensor.
#include "chimera/layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/check.hpp"

namespace chimera {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

bool parseInt(std::string_view text, int& out) {
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && ptr == text.data() + text.size();
}

Status parsePlacement(std::string_view text, Placement& out) {
  if (text == "R") {
    out = Placement::replicate();
    return Status::ok();
  }
  if (text == "P") {
    out = Placement::partial(ReduceOp::Sum);
    return Status::ok();
  }
  if (text.size() > 3 && text.substr(0, 2) == "P(" && text.back() == ')') {
    ReduceOp op = ReduceOp::Sum;
    CHIMERA_RETURN_IF_ERROR(parseReduceOp(text.substr(2, text.size() - 3), op));
    out = Placement::partial(op);
    return Status::ok();
  }
  int value = 0;
  if (text.size() > 1 && text[0] == 'S' && parseInt(text.substr(1), value) && value >= 0 && value < 8) {
    out = Placement::shard(value);
    return Status::ok();
  }
  if (text.size() > 1 && text[0] == '@' && parseInt(text.substr(1), value) && value >= 0) {
    out = Placement::onStage(value);
    return Status::ok();
  }
  return Status::invalidArgument(
      fmt::format("malformed placement '{}' (expected R, S<dim 0-7>, P, P(<op>) or @<stage>)", text));
}

// The axes named by "a+b" in written order.
Status parseAxisList(std::string_view text, const Mesh& mesh, std::vector<int>& out) {
  std::vector<int> axes;
  std::string_view rest = text;
  while (true) {
    const auto plus = rest.find('+');
    const std::string_view name = trim(rest.substr(0, plus));
    CHIMERA_CHECK_ARG(!name.empty(), "empty axis name in '{}'", text);
    int index = 0;
    CHIMERA_RETURN_IF_ERROR(mesh.axisIndex(name, index));
    axes.push_back(index);
    if (plus == std::string_view::npos) break;
    rest = rest.substr(plus + 1);
  }
  out = std::move(axes);
  return Status::ok();
}

}  // namespace

std::string Placement::toString() const {
  switch (kind) {
    case Kind::Replicate: return "R";
    case Kind::Shard: return fmt::format("S{}", dim);
    case Kind::Partial: return op == ReduceOp::Sum ? std::string("P") : fmt::format("P({})", reduceOpName(op));
    case Kind::Stage: return fmt::format("@{}", stage);
  }
  return "?";
}

bool Placement::operator==(const Placement& other) const {
  if (kind != other.kind) return false;
  switch (kind) {
    case Kind::Replicate: return true;
    case Kind::Shard: return dim == other.dim;
    case Kind::Partial: return op == other.op;
    case Kind::Stage: return stage == other.stage;
  }
  return false;
}

Layout Layout::replicated(const Mesh& mesh) {
  Layout layout;
  layout.mesh_ = std::make_shared<const Mesh>(mesh);
  layout.placements_.assign(static_cast<std::size_t>(mesh.numAxes()), Placement::replicate());
  return layout;
}

Status Layout::parse(std::string_view text, const Mesh& mesh, Layout& out) {
  const std::string_view body = trim(text);
  CHIMERA_CHECK_ARG(!body.empty(), "empty layout (expected e.g. \"pp=@0,tp=P\"; unlisted axes are R)");
  Layout layout = replicated(mesh);
  if (body == "R") {
    out = std::move(layout);
    return Status::ok();
  }
  std::vector<bool> seen(static_cast<std::size_t>(mesh.numAxes()), false);
  std::vector<std::pair<int, int>> singles;  // (axis, dim) for one-axis shard entries
  std::string_view rest = body;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    const auto eq = entry.find('=');
    CHIMERA_CHECK_ARG(eq != std::string_view::npos, "malformed layout entry '{}' in \"{}\" (expected AXES=PLACEMENT)",
                      entry, text);
    std::vector<int> axes;
    CHIMERA_RETURN_IF_ERROR(parseAxisList(trim(entry.substr(0, eq)), mesh, axes));
    Placement placement;
    CHIMERA_RETURN_IF_ERROR(parsePlacement(trim(entry.substr(eq + 1)), placement));
    for (int axis : axes) {
      CHIMERA_CHECK_ARG(!seen[static_cast<std::size_t>(axis)], "axis '{}' is placed twice in layout \"{}\"",
                        mesh.axis(axis).name, text);
      seen[static_cast<std::size_t>(axis)] = true;
    }
    if (placement.isStage()) {
      CHIMERA_CHECK_ARG(axes.size() == 1, "a stage placement names one axis, not '{}' in \"{}\"", entry, text);
      CHIMERA_CHECK_ARG(placement.stage < mesh.axis(axes[0]).size, "stage {} is out of range for axis '{}' of size {}",
                        placement.stage, mesh.axis(axes[0]).name, mesh.axis(axes[0]).size);
    }
    if (placement.isShard() && axes.size() == 1) {
      singles.emplace_back(axes[0], placement.dim);
    } else {
      for (int axis : axes) layout = layout.with(axis, placement);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  std::sort(singles.begin(), singles.end());
  for (auto [axis, dim] : singles) layout = layout.with(axis, Placement::shard(dim));
  const AxisSet partial = layout.axesOfKind(Placement::Kind::Partial);
  for (int axis = 0; axis < mesh.numAxes(); ++axis) {
    if (!partial.contains(axis)) continue;
    CHIMERA_CHECK_ARG(layout.placement(axis).op == layout.partialOp(),
                      "layout \"{}\" is partial with different reduce ops ({} and {}); one op per layout is supported",
                      text, reduceOpName(layout.partialOp()), reduceOpName(layout.placement(axis).op));
  }
  out = std::move(layout);
  return Status::ok();
}

std::vector<int> Layout::splitAxes(int dim) const {
  if (dim < 0 || dim >= static_cast<int>(splits_.size())) return {};
  return splits_[static_cast<std::size_t>(dim)];
}

int Layout::maxShardDim() const { return static_cast<int>(splits_.size()) - 1; }

AxisSet Layout::axesOfKind(Placement::Kind kind) const {
  AxisSet set;
  for (int axis = 0; axis < static_cast<int>(placements_.size()); ++axis) {
    if (placements_[static_cast<std::size_t>(axis)].kind == kind) set = set | AxisSet::single(axis);
  }
  return set;
}

ReduceOp Layout::partialOp() const {
  for (const auto& p : placements_) {
    if (p.isPartial()) return p.op;
  }
  return ReduceOp::Sum;
}

Status Layout::validate(const TensorSpec& spec) const {
  for (int dim = 0; dim <= maxShardDim(); ++dim) {
    const auto& axes = splits_[static_cast<std::size_t>(dim)];
    if (axes.empty()) continue;
    std::int64_t shards = 1;
    for (int axis : axes) shards *= mesh().axis(axis).size;
    CHIMERA_CHECK_ARG(dim < spec.rank(), "layout {} shards dim {} but the tensor {} has {} dimensions", toString(), dim,
                      spec.toString(), spec.rank());
    const std::int64_t size = spec.shape[static_cast<std::size_t>(dim)];
    if (size % shards == 0) continue;
    // The names only for the message: validate runs for every candidate layout of a plan.
    std::string names;
    for (int axis : axes) {
      if (!names.empty()) names += '+';
      names += mesh().axis(axis).name;
    }
    return Status::invalidArgument(
        fmt::format("dim {} of size {} is not divisible by {} shards over {} (uneven splits are not supported)", dim,
                    size, shards, names));
  }
  return Status::ok();
}

const Mesh& Layout::mesh() const {
  static const Mesh kNoMesh;
  return mesh_ ? *mesh_ : kNoMesh;
}

bool Layout::holds(int rank) const {
  // Called per rank for every candidate step while planning: the mesh is read only for a
  // stage axis (a layout with placements always has its mesh).
  for (std::size_t axis = 0; axis < placements_.size(); ++axis) {
    const Placement& p = placements_[axis];
    if (p.isStage() && mesh_->coordinate(rank, static_cast<int>(axis)) != p.stage) return false;
  }
  return true;
}

std::vector<int> Layout::holders() const {
  std::vector<int> ranks;
  for (int rank = 0; rank < mesh().size(); ++rank) {
    if (holds(rank)) ranks.push_back(rank);
  }
  return ranks;
}

Box Layout::rankBox(int rank, const TensorSpec& spec) const {
  Box box = spec.fullBox();
  if (!holds(rank)) {
    std::fill(box.extent.begin(), box.extent.end(), 0);
    return box;
  }
  const Mesh& grid = mesh();
  for (int dim = 0; dim <= maxShardDim() && dim < spec.rank(); ++dim) {
    std::int64_t index = 0;
    std::int64_t shards = 1;
    for (int axis : splits_[static_cast<std::size_t>(dim)]) {
      const int size = grid.axis(axis).size;
      index = index * size + grid.coordinate(rank, axis);
      shards *= size;
    }
    const auto d = static_cast<std::size_t>(dim);
    box.extent[d] = spec.shape[d] / shards;
    box.offset[d] = index * box.extent[d];
  }
  return box;
}

std::vector<std::int64_t> Layout::localShape(const TensorSpec& spec) const {
  std::vector<std::int64_t> shape = spec.shape;
  for (int dim = 0; dim <= maxShardDim() && dim < spec.rank(); ++dim) {
    for (int axis : splits_[static_cast<std::size_t>(dim)])
      shape[static_cast<std::size_t>(dim)] /= mesh().axis(axis).size;
  }
  return shape;
}

std::int64_t Layout::localBytes(const TensorSpec& spec) const {
  std::int64_t elements = 1;
  for (auto e : localShape(spec)) elements *= e;
  return elements * static_cast<std::int64_t>(dataTypeSize(spec.dtype));
}

void Layout::removeFromSplits(int axis) {
  for (auto& axes : splits_) axes.erase(std::remove(axes.begin(), axes.end(), axis), axes.end());
  while (!splits_.empty() && splits_.back().empty()) splits_.pop_back();
}

Layout Layout::with(int axis, Placement placement) const {
  Layout out = *this;
  out.removeFromSplits(axis);
  out.placements_[static_cast<std::size_t>(axis)] = placement;
  if (placement.isShard()) {
    const auto dim = static_cast<std::size_t>(placement.dim);
    if (out.splits_.size() <= dim) out.splits_.resize(dim + 1);
    out.splits_[dim].push_back(axis);
  }
  return out;
}

Layout Layout::withShards(AxisSet axes, int dim) const {
  Layout out = *this;
  for (int axis = 0; axis < mesh().numAxes(); ++axis) {
    if (axes.contains(axis)) out = out.with(axis, Placement::shard(dim));
  }
  return out;
}

Layout Layout::withReplicated(AxisSet axes) const {
  Layout out = *this;
  for (int axis = 0; axis < mesh().numAxes(); ++axis) {
    if (axes.contains(axis)) out = out.with(axis, Placement::replicate());
  }
  return out;
}

std::string Layout::toString() const {
  // One entry per non-R axis in mesh order; the axes of a shard dim form one group entry,
  // printed where its first (mesh-order) axis would be. Written into one string: the
  // Executor's signatures print layouts on every call.
  std::string text;
  std::vector<bool> done(placements_.size(), false);
  for (int axis = 0; axis < static_cast<int>(placements_.size()); ++axis) {
    const auto& p = placements_[static_cast<std::size_t>(axis)];
    if (done[static_cast<std::size_t>(axis)] || p.isReplicate()) continue;
    if (!text.empty()) text += ',';
    if (p.isShard()) {
      bool first = true;
      for (int a : splits_[static_cast<std::size_t>(p.dim)]) {
        if (!first) text += '+';
        first = false;
        text += mesh().axis(a).name;
        done[static_cast<std::size_t>(a)] = true;
      }
    } else {
      text += mesh().axis(axis).name;
    }
    text += '=';
    text += p.toString();
  }
  if (text.empty()) return fmt::format("{}=R", mesh().numAxes() > 0 ? mesh().axis(0).name : std::string("?"));
  return text;
}

bool Layout::operator==(const Layout& other) const {
  return mesh().axesEqual(other.mesh()) && placements_ == other.placements_ && splits_ == other.splits_;
}

}  // namespace chimera
