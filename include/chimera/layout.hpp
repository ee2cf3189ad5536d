// SPDX-License-Identifier: Apache-2.0
// Layouts (stable API): how a tensor lies on a mesh, one placement per axis (R, S<dim>,
// P(op), stage @k), with each rank's box and the text form ("pp=@0,tp=P").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/mesh.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"
#include "chimera/types.hpp"

namespace chimera {

/// How a tensor is placed along one mesh axis.
struct Placement {
  enum class Kind : std::uint8_t {
    Replicate,  ///< `R`: every coordinate of the axis holds the same data
    Shard,      ///< `S<dim>`: the axis splits tensor dimension `dim`
    Partial,    ///< `P` / `P(op)`: the value is the `op`-reduction over the axis
    Stage,      ///< `@k`: only coordinate `k` of the axis holds the tensor (a pipeline stage)
  };
  Kind kind = Kind::Replicate;
  int dim = 0;                  ///< Shard: the tensor dimension
  ReduceOp op = ReduceOp::Sum;  ///< Partial: the reduction
  int stage = 0;                ///< Stage: the coordinate that holds the tensor

  static Placement replicate() { return {}; }
  static Placement shard(int dim) { return {Kind::Shard, dim, ReduceOp::Sum, 0}; }
  static Placement partial(ReduceOp op = ReduceOp::Sum) { return {Kind::Partial, 0, op, 0}; }
  static Placement onStage(int stage) { return {Kind::Stage, 0, ReduceOp::Sum, stage}; }
  bool isReplicate() const { return kind == Kind::Replicate; }
  bool isShard() const { return kind == Kind::Shard; }
  bool isPartial() const { return kind == Kind::Partial; }
  bool isStage() const { return kind == Kind::Stage; }
  /// "R", "S0", "P", "P(max)", "@1".
  std::string toString() const;
  bool operator==(const Placement& other) const;
};

/// Where each part of a tensor lives on a Mesh: one Placement per mesh axis, plus, for
/// every tensor dimension split by several axes, the nesting order of those axes (outer
/// first). Nested splits are stored in one canonical form, so `dp=S0,tp=S0` and
/// `dp+tp=S0` are the same value and equality is structural.
///
/// Text form: comma-separated `AXES=PLACEMENT` entries, `AXES` one axis or a `+` group;
/// unlisted axes are `R`. A `+` group on `S<d>` nests in written order (first = outer);
/// separate entries on the same dimension nest in mesh order (earlier axis outer) after
/// any group already on it. All partial axes must share one reduce op.
class Layout {
 public:
  Layout() = default;
  /// Every axis `R` on `mesh`.
  static Layout replicated(const Mesh& mesh);
  /// Parses the text form. InvalidArgument on an unknown axis, an axis given twice,
  /// malformed placement text, a stage out of range, or partial axes with different ops.
  [[nodiscard]] static Status parse(std::string_view text, const Mesh& mesh, Layout& out);

  /// The mesh the layout is on (an empty mesh for a default-constructed layout).
  const Mesh& mesh() const;
  /// Placement of mesh axis `axis`.
  const Placement& placement(int axis) const { return placements_[static_cast<std::size_t>(axis)]; }
  /// The axes splitting tensor dimension `dim`, outer first (empty when `dim` is whole).
  std::vector<int> splitAxes(int dim) const;
  /// Highest tensor dimension any axis splits, or -1.
  int maxShardDim() const;
  /// Axes with the given kind, as a set.
  AxisSet axesOfKind(Placement::Kind kind) const;
  /// The reduce op of the partial axes (Sum when there are none).
  ReduceOp partialOp() const;

  /// Checks that the layout fits `spec`: every shard dim exists and its extent divides
  /// evenly by the product of the axes splitting it (uneven splits are rejected:
  /// "dim 0 of size 10 is not divisible by 4 shards over tp").
  [[nodiscard]] Status validate(const TensorSpec& spec) const;
  /// True when world rank `rank` holds a copy (its coordinate matches every `@k`).
  bool holds(int rank) const;
  /// The ranks that hold a copy, ascending.
  std::vector<int> holders() const;
  /// The logical box rank `rank` holds. Precondition: validate(spec) succeeded.
  /// For a rank that holds nothing the box is empty.
  Box rankBox(int rank, const TensorSpec& spec) const;
  /// Local shape of a holding rank. Precondition: validate(spec) succeeded.
  std::vector<std::int64_t> localShape(const TensorSpec& spec) const;
  /// Bytes a holding rank stores. Precondition: validate(spec) succeeded.
  std::int64_t localBytes(const TensorSpec& spec) const;

  /// Copy with axis `axis` set to `placement` (Shard: appended as the innermost split).
  Layout with(int axis, Placement placement) const;
  /// Copy with the axes of `axes` (mesh order) appended as the innermost splits of `dim`.
  Layout withShards(AxisSet axes, int dim) const;
  /// Copy with every axis of `axes` set to `R`.
  Layout withReplicated(AxisSet axes) const;

  /// Canonical text ("pp=@0,tp=P", "dp+tp=S0"); parses back to an equal layout.
  std::string toString() const;
  bool operator==(const Layout& other) const;

 private:
  // Shared, immutable: planning copies layouts by the thousand, and a Mesh holds strings.
  std::shared_ptr<const Mesh> mesh_;
  std::vector<Placement> placements_;
  // splits_[d]: axes splitting dim d, outer first; no trailing empty entries.
  std::vector<std::vector<int>> splits_;
  void removeFromSplits(int axis);
};

}  // namespace chimera
