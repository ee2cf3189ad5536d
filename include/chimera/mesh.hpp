// SPDX-License-Identifier: Apache-2.0
// Meshes (stable API): named axes over the world ranks, row-major, and the axis groups
// (AxisSet) collectives run on.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/status.hpp"

namespace chimera {

/// One named axis of a device mesh ("tp", size 4).
struct MeshAxis {
  std::string name;
  int size = 0;
};

/// A set of mesh axes, flattened into one group (`dp+tp`). Stored as a bitmask over the
/// mesh's axis indices, so the order is always the mesh's order (earlier axis outer),
/// whatever order the text named them in.
class AxisSet {
 public:
  AxisSet() = default;
  /// The set holding axis index `axis` alone.
  static AxisSet single(int axis) { return AxisSet(1u << axis); }
  /// The set from a raw bitmask (bit i = mesh axis i).
  static AxisSet fromBits(std::uint32_t bits) { return AxisSet(bits); }
  bool contains(int axis) const { return (bits_ >> axis) & 1u; }
  bool empty() const { return bits_ == 0; }
  std::uint32_t bits() const { return bits_; }
  AxisSet operator|(AxisSet other) const { return AxisSet(bits_ | other.bits_); }
  AxisSet operator&(AxisSet other) const { return AxisSet(bits_ & other.bits_); }
  bool operator==(const AxisSet&) const = default;

 private:
  explicit AxisSet(std::uint32_t bits) : bits_(bits) {}
  std::uint32_t bits_ = 0;
};

/// Named axes over the world ranks, row-major: for `pp=2,tp=4`, rank = pp*4 + tp.
/// Immutable after creation; cheap to copy.
class Mesh {
 public:
  /// Most axes a mesh may have.
  static constexpr int kMaxAxes = 16;
  /// Most ranks a mesh may have (2^24: far beyond any job, and a mesh holds 4 bytes per rank).
  static constexpr long long kMaxRanks = 1LL << 24;

  Mesh() = default;

  /// Builds a mesh from axes; its size is the product of theirs. InvalidArgument when a name
  /// is empty, duplicated or not an identifier ([A-Za-z_][A-Za-z0-9_]*), a size is < 1,
  /// there are no axes or more than kMaxAxes, or the product exceeds kMaxRanks.
  [[nodiscard]] static Status create(std::vector<MeshAxis> axes, Mesh& out);
  /// As `create`, and InvalidArgument when the product of the sizes differs from worldSize.
  [[nodiscard]] static Status create(std::vector<MeshAxis> axes, int worldSize, Mesh& out);
  /// Parses "pp=2,tp=4" and validates as `create`. Malformed text is InvalidArgument
  /// quoting the offending part.
  [[nodiscard]] static Status parse(std::string_view text, Mesh& out);
  /// As `parse`, and InvalidArgument when the mesh does not have `worldSize` ranks.
  [[nodiscard]] static Status parse(std::string_view text, int worldSize, Mesh& out);
  /// A one-axis mesh named `name` spanning `worldSize` ranks.
  static Mesh flat(int worldSize, std::string name = "world");

  /// Number of ranks.
  int size() const { return size_; }
  /// InvalidArgument "mesh pp=2,tp=4 has 8 ranks but the world has 6" unless size() == worldSize.
  [[nodiscard]] Status checkWorldSize(int worldSize) const;
  /// Number of axes.
  int numAxes() const { return static_cast<int>(axes_.size()); }
  const std::vector<MeshAxis>& axes() const { return axes_; }
  const MeshAxis& axis(int index) const { return axes_[static_cast<std::size_t>(index)]; }
  /// Index of the axis called `name`; InvalidArgument "unknown mesh axis 'x' (mesh pp=2,tp=4)".
  [[nodiscard]] Status axisIndex(std::string_view name, int& out) const;
  /// Parses "tp" or "dp+tp" into an AxisSet; InvalidArgument on unknown, empty or repeated axes.
  [[nodiscard]] Status parseAxes(std::string_view text, AxisSet& out) const;
  /// The set of every axis (the world group).
  AxisSet allAxes() const { return AxisSet::fromBits((numAxes() >= 32 ? ~0u : ((1u << numAxes()) - 1u))); }
  /// "dp+tp" for a set (axes in mesh order).
  std::string axesName(AxisSet axes) const;

  /// Coordinates of `rank` (one per axis). Precondition: 0 <= rank < size().
  std::vector<int> coordinates(int rank) const;
  /// Coordinate of `rank` on axis `axis` alone (no allocation). Preconditions: both in range.
  int coordinate(int rank, int axis) const {
    return (rank / strides_[static_cast<std::size_t>(axis)]) % axes_[static_cast<std::size_t>(axis)].size;
  }
  /// Rank at `coords` (one per axis). Precondition: every coordinate in range.
  int rankOf(std::span<const int> coords) const;

  /// Number of ranks in a group spanning `axes` (product of their sizes; 1 for the empty set).
  int groupSize(AxisSet axes) const;
  /// Index of `rank` inside its group along `axes`: its coordinates on those axes,
  /// flattened row-major in mesh order.
  int groupIndex(int rank, AxisSet axes) const;
  /// World ranks of the group along `axes` that contains `rank`, ordered by group index.
  std::vector<int> groupRanks(int rank, AxisSet axes) const;
  /// The world rank with group index `index` in `rank`'s group along `axes`.
  int groupPeer(int rank, AxisSet axes, int index) const;
  /// An id shared by exactly the ranks of one group along `axes` (usable as an MPI_Comm_split colour).
  int groupColor(int rank, AxisSet axes) const;

  /// The mesh of the ranks whose coordinate on `axis` equals `coordinate` (e.g. one pipeline
  /// stage): the remaining axes, with `worldRanks()` mapping its ranks back to the world.
  /// InvalidArgument when the coordinate is out of range or the mesh has one axis only.
  [[nodiscard]] Status subMesh(int axis, int coordinate, Mesh& out) const;
  /// For a sub-mesh, the world rank of each of its ranks; for a mesh built by create, 0..size-1.
  const std::vector<int>& worldRanks() const { return worldRanks_; }

  /// "pp=2,tp=4".
  std::string toString() const;
  bool operator==(const Mesh& other) const { return axesEqual(other) && worldRanks_ == other.worldRanks_; }
  /// Same axis names and sizes, in the same order.
  bool axesEqual(const Mesh& other) const;

 private:
  std::vector<MeshAxis> axes_;
  std::vector<int> strides_;  // row-major: stride of the last axis is 1
  std::vector<int> worldRanks_;
  int size_ = 0;
};

}  // namespace chimera
