// SPDX-License-Identifier: Apache-2.0
// Helpers of the Session tests: a chain recorded call by call through a Session the way a
// framework issues it, and the consumed part of its result read back for comparison.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "chimera/chain.hpp"
#include "chimera/mpi_backend.hpp"
#include "chimera/session.hpp"
#include "core/check.hpp"
#include "mpi_test_util.hpp"

namespace chimera::testing {

/// A chain in text form on a mesh, as the executor tests name them.
struct SessionCase {
  std::string name;
  std::string mesh;
  std::string from;
  std::string chain;
  std::string consume;  ///< empty: no declaration
  std::vector<std::int64_t> shape;
  bool expectFused = true;  ///< the bytes cost model is known to fuse it
};

/// What one recorded run left behind on this rank.
struct SessionRun {
  Status status;
  std::vector<double> consumed;  ///< the consumed box of the final buffer, row-major
  SessionStats stats;
};

/// Element values of `box` (local coordinates) of a row-major tensor of `shape` at `buffer`.
inline std::vector<double> readBox(const void* buffer, const std::vector<std::int64_t>& shape, const Box& box,
                                   DataType dtype) {
  std::vector<double> out;
  if (box.empty()) return out;
  std::vector<std::int64_t> at = box.offset;
  const std::size_t dims = shape.size();
  while (true) {
    std::int64_t linear = 0;
    for (std::size_t d = 0; d < dims; ++d) linear = linear * shape[d] + at[d];
    out.push_back(loadElement(buffer, static_cast<std::size_t>(linear), dtype));
    std::size_t d = dims;
    while (d > 0) {
      --d;
      if (++at[d] < box.offset[d] + box.extent[d]) break;
      at[d] = box.offset[d];
      if (d == 0) return out;
    }
    if (dims == 0) return out;
  }
}

/// Fills this rank's part of a tensor of `spec` placed as `layout` so that it agrees with the
/// layout: equal on replicated axes, the same logical element on every shard, and one partial
/// term per coordinate of the partial axes: the value depends on (seed, partial index, element).
inline void fillInput(void* buffer, const Layout& layout, const TensorSpec& spec, int rank, std::uint32_t seed) {
  if (!layout.holds(rank)) return;
  const Box box = layout.rankBox(rank, spec);
  const int term = layout.mesh().groupIndex(rank, layout.axesOfKind(Placement::Kind::Partial));
  const std::int64_t count = box.volume();
  for (std::int64_t local = 0; local < count; ++local) {
    std::int64_t rest = local;
    std::int64_t logical = 0;
    std::int64_t stride = 1;
    for (std::size_t d = spec.shape.size(); d-- > 0;) {
      const std::int64_t coord = box.offset[d] + rest % box.extent[d];
      rest /= box.extent[d];
      logical += coord * stride;
      stride *= spec.shape[d];
    }
    storeElement(buffer, static_cast<std::size_t>(local), spec.dtype,
                 patternValue(seed, term, static_cast<std::size_t>(logical), 8));
  }
}

/// Records `op` on `in` through `session`, allocating the output buffer in `storage`.
inline Status recordOp(Session& session, TensorHandle in, const ChainOp& op, const TensorSpec& spec,
                       std::vector<std::vector<std::uint64_t>>& storage, TensorHandle& out) {
  Layout layout;
  CHIMERA_RETURN_IF_ERROR(session.layoutOf(in, layout));
  OpEffect effect;
  CHIMERA_RETURN_IF_ERROR(applyChainOp(layout, op, spec, effect));
  void* buffer = nullptr;
  std::size_t bytes = 0;
  const bool inPlace = op.kind == ChainOp::Kind::AllReduce || op.kind == ChainOp::Kind::Broadcast;
  if (!inPlace && effect.output.holds(worldRank())) {
    bytes = static_cast<std::size_t>(effect.output.localBytes(spec));
    storage.push_back(makeBuffer(bytes / dataTypeSize(spec.dtype), spec.dtype));
    buffer = storage.back().data();
  }
  return session.record(in, op, buffer, bytes, out);
}

/// Runs `c` through a fresh session `steps` times (inputs from `seed`), each step one window
/// ending in the consume declaration (or a plain flush), and reads the consumed part back.
/// `topology` is the session's cost model: bytes by default, as the cases check the fused
/// programs on small tensors, which the MPI backend's own model ("") runs as recorded.
inline SessionRun runCase(const SessionCase& c, bool fusion, std::uint32_t seed, int steps = 1,
                          const std::string& topology = "bytes") {
  SessionRun run;
  const int rank = worldRank();
  Mesh mesh;
  Layout from;
  Chain chain;
  std::optional<Layout> consume;
  TensorSpec spec{c.shape, DataType::F32};
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Session> session;
  run.status = Mesh::parse(c.mesh, worldSize(), mesh);
  if (run.status.isOk()) run.status = Layout::parse(c.from, mesh, from);
  if (run.status.isOk()) run.status = Chain::parse(c.chain, mesh, chain);
  if (run.status.isOk() && !c.consume.empty()) {
    consume.emplace();
    run.status = Layout::parse(c.consume, mesh, *consume);
  }
  if (run.status.isOk()) run.status = createMpiBackend(mesh, backend);
  SessionOptions options;
  options.fusion = fusion;
  options.topology = topology;
  if (run.status.isOk()) run.status = Session::create(*backend, options, session);
  for (int step = 0; run.status.isOk() && step < steps; ++step) {
    std::vector<std::vector<std::uint64_t>> storage;
    const auto inBytes = from.holds(rank) ? static_cast<std::size_t>(from.localBytes(spec)) : 0;
    storage.push_back(makeBuffer(inBytes / 4, spec.dtype));
    fillInput(storage[0].data(), from, spec, rank, seed + static_cast<std::uint32_t>(step));
    TensorHandle t;
    run.status = session->tensor(inBytes > 0 ? storage[0].data() : nullptr, inBytes, spec, from, t);
    Layout finalLayout = from;
    for (const ChainOp& op : chain.ops) {
      if (!run.status.isOk()) break;
      TensorHandle next;
      run.status = recordOp(*session, t, op, spec, storage, next);
      t = next;
    }
    if (run.status.isOk()) run.status = session->layoutOf(t, finalLayout);
    void* finalBuffer = storage.back().data();
    if (run.status.isOk()) run.status = consume ? session->consume(t, *consume) : session->flush();
    const Layout& read = consume ? *consume : finalLayout;
    if (run.status.isOk() && read.holds(rank)) {
      const Box box = read.rankBox(rank, spec).relativeTo(finalLayout.rankBox(rank, spec).offset);
      run.consumed = readBox(finalBuffer, finalLayout.localShape(spec), box, spec.dtype);
    }
  }
  if (session) run.stats = session->stats();
  return run;
}

}  // namespace chimera::testing
