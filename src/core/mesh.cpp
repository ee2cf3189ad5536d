// SPDX-License-Identifier: Apache-2.0
// Implements Mesh: parsing, validation, axis groups and rank coordinates.
#include "chimera/mesh.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <numeric>

#include "core/check.hpp"

namespace chimera {
namespace {

bool isIdentifier(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// Validates `axes` as Mesh::create documents and sets `ranks` to the product of their sizes,
// before anything is allocated for them.
Status checkAxes(const std::vector<MeshAxis>& axes, long long& ranks) {
  CHIMERA_CHECK_ARG(!axes.empty(), "mesh has no axes");
  CHIMERA_CHECK_ARG(static_cast<int>(axes.size()) <= Mesh::kMaxAxes, "mesh has {} axes; at most {} are supported",
                    axes.size(), Mesh::kMaxAxes);
  long long product = 1;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    const auto& axis = axes[i];
    CHIMERA_CHECK_ARG(!axis.name.empty(), "mesh axis {} has an empty name", i);
    CHIMERA_CHECK_ARG(isIdentifier(axis.name), "mesh axis name '{}' is not an identifier ([A-Za-z_][A-Za-z0-9_]*)",
                      axis.name);
    CHIMERA_CHECK_ARG(axis.size >= 1, "mesh axis '{}' has size {}; sizes must be >= 1", axis.name, axis.size);
    for (std::size_t j = 0; j < i; ++j) {
      CHIMERA_CHECK_ARG(axes[j].name != axis.name, "mesh axis name '{}' appears twice", axis.name);
    }
    product *= axis.size;
    CHIMERA_CHECK_ARG(product <= Mesh::kMaxRanks, "mesh is too large: more than {} ranks", Mesh::kMaxRanks);
  }
  ranks = product;
  return Status::ok();
}

// Splits "pp=2,tp=4" into axes; malformed text is InvalidArgument quoting the offending part.
Status parseAxisList(std::string_view text, std::vector<MeshAxis>& axes) {
  axes.clear();
  std::string_view rest = text;
  CHIMERA_CHECK_ARG(!trim(text).empty(), "empty mesh description (expected e.g. \"pp=2,tp=4\")");
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view part = trim(rest.substr(0, comma));
    const auto eq = part.find('=');
    CHIMERA_CHECK_ARG(eq != std::string_view::npos, "malformed mesh axis '{}' in \"{}\" (expected name=size)", part,
                      text);
    const std::string_view name = trim(part.substr(0, eq));
    const std::string_view sizeText = trim(part.substr(eq + 1));
    int size = 0;
    const auto [ptr, ec] = std::from_chars(sizeText.data(), sizeText.data() + sizeText.size(), size);
    CHIMERA_CHECK_ARG(ec == std::errc() && ptr == sizeText.data() + sizeText.size() && !sizeText.empty(),
                      "malformed size '{}' of mesh axis '{}' in \"{}\"", sizeText, name, text);
    axes.push_back({std::string(name), size});
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return Status::ok();
}

// "pp=2,tp=4", as Mesh::toString prints a mesh of these axes.
std::string axesText(const std::vector<MeshAxis>& axes) {
  std::string text;
  for (const auto& axis : axes) text += fmt::format("{}{}={}", text.empty() ? "" : ",", axis.name, axis.size);
  return text;
}

}  // namespace

Status Mesh::create(std::vector<MeshAxis> axes, Mesh& out) {
  long long ranks = 0;
  CHIMERA_RETURN_IF_ERROR(checkAxes(axes, ranks));
  Mesh mesh;
  mesh.axes_ = std::move(axes);
  mesh.size_ = static_cast<int>(ranks);
  mesh.strides_.assign(mesh.axes_.size(), 1);
  for (int i = mesh.numAxes() - 2; i >= 0; --i) {
    mesh.strides_[static_cast<std::size_t>(i)] =
        mesh.strides_[static_cast<std::size_t>(i) + 1] * mesh.axes_[static_cast<std::size_t>(i) + 1].size;
  }
  mesh.worldRanks_.resize(static_cast<std::size_t>(mesh.size_));
  std::iota(mesh.worldRanks_.begin(), mesh.worldRanks_.end(), 0);
  out = std::move(mesh);
  return Status::ok();
}

Status Mesh::create(std::vector<MeshAxis> axes, int worldSize, Mesh& out) {
  // The world check comes before create allocates anything for the mesh.
  long long ranks = 0;
  CHIMERA_RETURN_IF_ERROR(checkAxes(axes, ranks));
  CHIMERA_CHECK_ARG(ranks == worldSize, "mesh {} has {} ranks but the world has {}", axesText(axes), ranks, worldSize);
  return create(std::move(axes), out);
}

Status Mesh::checkWorldSize(int worldSize) const {
  CHIMERA_CHECK_ARG(size_ == worldSize, "mesh {} has {} ranks but the world has {}", toString(), size_, worldSize);
  return Status::ok();
}

Status Mesh::parse(std::string_view text, int worldSize, Mesh& out) {
  std::vector<MeshAxis> axes;
  CHIMERA_RETURN_IF_ERROR(parseAxisList(text, axes));
  return create(std::move(axes), worldSize, out);
}

Status Mesh::parse(std::string_view text, Mesh& out) {
  std::vector<MeshAxis> axes;
  CHIMERA_RETURN_IF_ERROR(parseAxisList(text, axes));
  return create(std::move(axes), out);
}

Mesh Mesh::flat(int worldSize, std::string name) {
  Mesh mesh;
  Status status = create({{std::move(name), worldSize}}, worldSize, mesh);
  CHIMERA_ASSERT(status.isOk());
  return mesh;
}

Status Mesh::axisIndex(std::string_view name, int& out) const {
  for (int i = 0; i < numAxes(); ++i) {
    if (axes_[static_cast<std::size_t>(i)].name == name) {
      out = i;
      return Status::ok();
    }
  }
  return Status::invalidArgument(fmt::format("unknown mesh axis '{}' (mesh {})", name, toString()));
}

Status Mesh::parseAxes(std::string_view text, AxisSet& out) const {
  CHIMERA_CHECK_ARG(!trim(text).empty(), "empty axis group (mesh {})", toString());
  AxisSet set;
  std::string_view rest = text;
  while (true) {
    const auto plus = rest.find('+');
    const std::string_view name = trim(rest.substr(0, plus));
    CHIMERA_CHECK_ARG(!name.empty(), "empty axis name in group '{}'", text);
    int index = 0;
    CHIMERA_RETURN_IF_ERROR(axisIndex(name, index));
    CHIMERA_CHECK_ARG(!set.contains(index), "axis '{}' appears twice in group '{}'", name, text);
    set = set | AxisSet::single(index);
    if (plus == std::string_view::npos) break;
    rest = rest.substr(plus + 1);
  }
  out = set;
  return Status::ok();
}

std::string Mesh::axesName(AxisSet axes) const {
  std::string name;
  for (int i = 0; i < numAxes(); ++i) {
    if (!axes.contains(i)) continue;
    if (!name.empty()) name += '+';
    name += axes_[static_cast<std::size_t>(i)].name;
  }
  return name;
}

std::vector<int> Mesh::coordinates(int rank) const {
  CHIMERA_ASSERT(rank >= 0 && rank < size_);
  std::vector<int> coords(axes_.size());
  for (std::size_t i = 0; i < axes_.size(); ++i) coords[i] = (rank / strides_[i]) % axes_[i].size;
  return coords;
}

int Mesh::rankOf(std::span<const int> coords) const {
  CHIMERA_ASSERT(coords.size() == axes_.size());
  int rank = 0;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    CHIMERA_ASSERT(coords[i] >= 0 && coords[i] < axes_[i].size);
    rank += coords[i] * strides_[i];
  }
  return rank;
}

int Mesh::groupSize(AxisSet axes) const {
  int size = 1;
  for (int i = 0; i < numAxes(); ++i) {
    if (axes.contains(i)) size *= axes_[static_cast<std::size_t>(i)].size;
  }
  return size;
}

// groupIndex and groupPeer read coordinates in place: the planner calls them per rank and
// per transfer of every candidate plan, where a coordinates() vector each cost a few per cent
// of cold planning.
int Mesh::groupIndex(int rank, AxisSet axes) const {
  CHIMERA_ASSERT(rank >= 0 && rank < size_);
  int index = 0;
  for (int i = 0; i < numAxes(); ++i) {
    if (axes.contains(i)) index = index * axes_[static_cast<std::size_t>(i)].size + coordinate(rank, i);
  }
  return index;
}

int Mesh::groupPeer(int rank, AxisSet axes, int index) const {
  CHIMERA_ASSERT(rank >= 0 && rank < size_ && index >= 0);
  int peer = rank;
  for (int i = numAxes() - 1; i >= 0; --i) {
    if (!axes.contains(i)) continue;
    const int size = axes_[static_cast<std::size_t>(i)].size;
    peer += (index % size - coordinate(rank, i)) * strides_[static_cast<std::size_t>(i)];
    index /= size;
  }
  return peer;
}

std::vector<int> Mesh::groupRanks(int rank, AxisSet axes) const {
  const int n = groupSize(axes);
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int g = 0; g < n; ++g) ranks[static_cast<std::size_t>(g)] = groupPeer(rank, axes, g);
  return ranks;
}

int Mesh::groupColor(int rank, AxisSet axes) const {
  // The rank with group index 0 identifies the group uniquely.
  return groupPeer(rank, axes, 0);
}

Status Mesh::subMesh(int axis, int coordinate, Mesh& out) const {
  CHIMERA_CHECK_ARG(axis >= 0 && axis < numAxes(), "axis index {} out of range (mesh {})", axis, toString());
  CHIMERA_CHECK_ARG(numAxes() > 1, "cannot take a sub-mesh of the one-axis mesh {}", toString());
  const auto& fixed = axes_[static_cast<std::size_t>(axis)];
  CHIMERA_CHECK_ARG(coordinate >= 0 && coordinate < fixed.size, "coordinate {} out of range for axis '{}' of size {}",
                    coordinate, fixed.name, fixed.size);
  std::vector<MeshAxis> axes;
  for (int i = 0; i < numAxes(); ++i) {
    if (i != axis) axes.push_back(axes_[static_cast<std::size_t>(i)]);
  }
  const int subSize = size_ / fixed.size;
  Mesh sub;
  CHIMERA_RETURN_IF_ERROR(create(std::move(axes), subSize, sub));
  for (int r = 0; r < subSize; ++r) {
    auto subCoords = sub.coordinates(r);
    subCoords.insert(subCoords.begin() + axis, coordinate);
    sub.worldRanks_[static_cast<std::size_t>(r)] = worldRanks_[static_cast<std::size_t>(rankOf(subCoords))];
  }
  out = std::move(sub);
  return Status::ok();
}

std::string Mesh::toString() const {
  std::string text;
  for (const auto& axis : axes_) {
    if (!text.empty()) text += ',';
    text += fmt::format("{}={}", axis.name, axis.size);
  }
  return text;
}

bool Mesh::axesEqual(const Mesh& other) const {
  if (axes_.size() != other.axes_.size()) return false;
  for (std::size_t i = 0; i < axes_.size(); ++i) {
    if (axes_[i].name != other.axes_[i].name || axes_[i].size != other.axes_[i].size) return false;
  }
  return true;
}

}  // namespace chimera
