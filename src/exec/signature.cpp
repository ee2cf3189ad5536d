// SPDX-License-Identifier: Apache-2.0
// Implements the executor's cache keys and the signature hash ranks agree on.
#include "exec/signature.hpp"

#include <fmt/format.h>

#include "common/hash.hpp"
#include "core/check.hpp"

namespace chimera::detail {

Status checkRequestMesh(const ChainRequest& request, const Mesh& mesh) {
  CHIMERA_CHECK_ARG(request.from.mesh().axesEqual(mesh), "the start layout {} is on mesh {}, the backend on {}",
                    request.from.toString(), request.from.mesh().toString(), mesh.toString());
  if (request.consume) {
    CHIMERA_CHECK_ARG(request.consume->mesh().axesEqual(mesh),
                      "the consumed layout {} is on mesh {}, the backend on {}", request.consume->toString(),
                      request.consume->mesh().toString(), mesh.toString());
  }
  CHIMERA_CHECK_ARG(!request.chain.ops.empty(), "empty chain");
  for (std::size_t i = 0; i < request.chain.ops.size(); ++i) {
    const AxisSet axes = request.chain.ops[i].axes;
    CHIMERA_CHECK_ARG(!axes.empty() && (axes.bits() & ~mesh.allAxes().bits()) == 0,
                      "chain op {} names mesh axes (bits {:#x}) the mesh {} does not have", i + 1, axes.bits(),
                      mesh.toString());
  }
  return Status::ok();
}

void appendLayoutWords(std::vector<std::int64_t>& words, const Layout& layout) {
  const int axes = layout.mesh().numAxes();
  for (int axis = 0; axis < axes; ++axis) {
    const Placement& p = layout.placement(axis);
    words.push_back(static_cast<std::int64_t>(p.kind) | (static_cast<std::int64_t>(p.dim) << 8) |
                    (static_cast<std::int64_t>(p.op) << 24) | (static_cast<std::int64_t>(p.stage) << 32));
  }
  for (int dim = 0; dim <= layout.maxShardDim(); ++dim) {
    int splitting = 0;
    for (int axis = 0; axis < axes; ++axis) {
      const Placement& p = layout.placement(axis);
      splitting += p.isShard() && p.dim == dim ? 1 : 0;
    }
    if (splitting < 2) continue;
    words.push_back(-1 - dim);
    for (const int axis : layout.splitAxes(dim)) words.push_back(axis);
  }
}

ChainKey chainKey(const ChainRequest& request) {
  ChainKey key;
  std::vector<std::int64_t>& words = key.words;
  words.reserve(16 + request.spec.shape.size() + 7 * request.chain.ops.size());
  words.push_back(static_cast<std::int64_t>(request.spec.dtype));
  words.push_back(static_cast<std::int64_t>(request.spec.shape.size()));
  words.insert(words.end(), request.spec.shape.begin(), request.spec.shape.end());
  appendLayoutWords(words, request.from);
  words.push_back(static_cast<std::int64_t>(request.chain.ops.size()));
  for (const ChainOp& op : request.chain.ops) {
    words.insert(words.end(), {static_cast<std::int64_t>(op.kind), static_cast<std::int64_t>(op.axes.bits()), op.dim,
                               op.toDim, op.root, op.stageStep});
  }
  words.push_back(request.consume ? 1 : 0);
  if (request.consume) appendLayoutWords(words, *request.consume);
  return key;
}

std::size_t ChainKeyHash::operator()(const ChainKey& key) const {
  Hasher hasher;
  for (const std::int64_t word : key.words) hasher.add(static_cast<std::uint64_t>(word));
  return static_cast<std::size_t>(hasher.value());
}

std::string chainSignature(const ChainRequest& request, std::string_view costName) {
  const Mesh& mesh = request.from.mesh();
  return fmt::format("chain|{}|{}|{}|{}|{}|{}", mesh.toString(), request.spec.toString(), request.from.toString(),
                     request.chain.toString(mesh), request.consume ? request.consume->toString() : "-", costName);
}

std::string redistributionSignature(const TensorSpec& spec, const Layout& from, const Layout& to,
                                    std::string_view costName) {
  return fmt::format("redistribute|{}|{}|{}|{}|{}", from.mesh().toString(), spec.toString(), from.toString(),
                     to.toString(), costName);
}

std::string planKey(const Plan& plan) {
  std::string key =
      fmt::format("{}|{}", plan.buffers.empty() ? "" : plan.buffers[0].layout.mesh().toString(), plan.spec.toString());
  for (const PlanBuffer& buffer : plan.buffers) key += fmt::format("|{}", buffer.layout.toString());
  for (const PlanStep& s : plan.steps) {
    key += fmt::format("|{}:{}>{}:{:x}:{}:{}:{}:{}:{}:{:x}", planStepKindName(s.kind), s.input, s.output, s.axes.bits(),
                       reduceOpName(s.op), s.dim, s.toDim, s.root, s.scale, s.allToAllGroup.bits());
    for (const BoxTransfer& t : s.transfers) {
      key += fmt::format(";{}>{}{}{}", t.src, t.dst, t.srcBox.toString(), t.dstBox.toString());
    }
  }
  return key;
}

}  // namespace chimera::detail
