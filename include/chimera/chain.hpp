// SPDX-License-Identifier: Apache-2.0
// Chains (stable API): the collective and local ops a framework issues on one tensor, their
// text form ("allreduce:tp,send:pp"), and what each op does to a layout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "chimera/op_kind.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera {

/// One collective (or local op) a framework issues on a tensor, addressed by mesh axes.
struct ChainOp {
  /// The kinds used in chains (`opKindUsedIn(kind, kOpInChain)`, op_kind.hpp), with their text:
  /// - `allreduce:AX`: P (or R) on AX -> R
  /// - `reducescatter:AX:DIM`: P (or R) on AX -> S(DIM)
  /// - `allgather:AX:DIM`: S(DIM) (innermost splits) on AX -> R
  /// - `alltoall:AX:FROM:TO`: S(FROM) on AX -> S(TO)
  /// - `broadcast:AX:ROOT`: @ROOT (or R) on AX -> R
  /// - `send:AX` (or `send:AX:forward`): @k on the single axis AX -> @k+1 (the forward
  ///   pipeline hand-off); `send:AX:backward`: @k -> @k-1 (the backward hand-off)
  /// - `slice:AX:DIM`: R on AX -> S(DIM), each rank keeps its own shard (local)
  using Kind = OpKind;
  Kind kind = Kind::AllReduce;
  AxisSet axes;       ///< the group (flattened in mesh order)
  int dim = 0;        ///< ReduceScatter/AllGather/Slice: the dim; AllToAll: FROM
  int toDim = 0;      ///< AllToAll: TO
  int root = 0;       ///< Broadcast: group index of the root
  int stageStep = 1;  ///< Send: +1 forward to the next stage (`send:AX`), -1 backward (`send:AX:backward`)

  /// The text form ("alltoall:ep+tp:0:1") on `mesh`.
  std::string toString(const Mesh& mesh) const;
  bool operator==(const ChainOp&) const = default;
};

/// "allreduce", "reducescatter", ... (the text keyword, opKindName).
std::string_view chainOpKindName(ChainOp::Kind kind);

/// What applying one op does to a tensor's layout and values.
struct OpEffect {
  Layout output;                ///< layout after the op
  ReduceOp op = ReduceOp::Sum;  ///< reductions: the op applied over the group
  /// Reductions over axes that are `R` with op sum multiply every value by this factor
  /// (the sum of n identical copies); 1 otherwise.
  std::int64_t scale = 1;
  bool operator==(const OpEffect&) const = default;
};

/// Applies `op` to a tensor of `spec` placed as `input`. Checks the op's precondition and
/// returns InvalidArgument naming it ("allgather:tp:1 needs tp to be the innermost split
/// of dim 1, but the layout is tp=S0"), or Unsupported for prod over replicated axes.
[[nodiscard]] Status applyChainOp(const Layout& input, const ChainOp& op, const TensorSpec& spec, OpEffect& out);

/// The ops a framework issues on one tensor, in order.
struct Chain {
  std::vector<ChainOp> ops;

  /// Parses "allreduce:tp,send:pp" on `mesh`. InvalidArgument quoting the malformed op.
  [[nodiscard]] static Status parse(std::string_view text, const Mesh& mesh, Chain& out);
  /// The comma-separated text form.
  std::string toString(const Mesh& mesh) const;
};

/// A chain applied to a starting layout: the layout before and after every op.
struct ChainTrace {
  std::vector<ChainOp> ops;           ///< the chain's ops
  std::vector<Layout> layouts;        ///< layouts[0] = start, layouts[i+1] = after op i
  std::vector<OpEffect> effects;      ///< effect of op i
  std::int64_t scale = 1;             ///< product of the effects' scales
  ReduceOp reduceOp = ReduceOp::Sum;  ///< the op of the chain's reductions (the start layout's partial op)
  const Layout& final() const { return layouts.back(); }
};

/// Applies every op in order, checking `start` against `spec` first. The first violated
/// precondition is returned, prefixed with the op's position ("op 2 (send:pp): ...").
[[nodiscard]] Status traceChain(const Layout& start, const Chain& chain, const TensorSpec& spec, ChainTrace& out);

/// Checks that a consumer reading `consumed` after the chain reads only data the chain's
/// `final` layout holds on the same rank: same stages, same partial axes, and every rank's
/// consumed box inside its final box. InvalidArgument naming the first offending rank.
[[nodiscard]] Status checkConsumable(const Layout& final, const Layout& consumed, const TensorSpec& spec);

}  // namespace chimera
