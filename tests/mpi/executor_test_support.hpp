// SPDX-License-Identifier: Apache-2.0
// Fixtures of the executor tests: the six scenario presets (and other meshes of the
// same axes), and inputs whose consumed output every rank can recompute from the logical
// tensor, so results are checked exactly against an independent reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "chimera/executor.hpp"
#include "chimera/layout.hpp"
#include "chimera/mesh.hpp"
#include "mpi_test_util.hpp"

namespace chimera::testing {

/// One chain to run: mesh, start layout, chain, consumed layout, logical shape.
struct ChainCase {
  std::string name;
  std::string mesh;
  std::string from;
  std::string chain;
  std::string consume;
  std::vector<std::int64_t> shape;
};

/// The six scenario presets (at 8 ranks) and another mesh of the same axes for each, for
/// world sizes 8, 4 and 2 (the cases whose mesh has `world` ranks).
inline std::vector<ChainCase> chainCases(int world) {
  const std::vector<std::int64_t> flat{32, 48};
  const std::vector<std::int64_t> cube{16, 24, 16};
  std::vector<ChainCase> all = {
      {"tp_sp", "tp=8", "tp=P", "allreduce:tp", "tp=S0", flat},
      {"tp_pp", "pp=2,tp=4", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat},
      {"tp_ep", "ep=2,tp=4", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", flat},
      {"sp_ep", "dp=2,sp=4", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube},
      {"pp_sp", "sp=4,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", flat},
      {"pp_ep", "pp=2,ep=4", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", flat},
      // Other meshes with 8 ranks.
      {"tp_sp", "dp=2,tp=4", "tp=P", "allreduce:tp", "tp=S1", flat},
      {"tp_pp", "pp=4,tp=2", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", cube},
      {"tp_ep", "ep=4,tp=2", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", flat},
      {"sp_ep", "dp=4,sp=2", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube},
      {"pp_sp", "sp=2,pp=4", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", cube},
      {"pp_ep", "pp=4,ep=2", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", cube},
      // 4 ranks.
      {"tp_sp", "tp=4", "tp=P", "allreduce:tp", "tp=S0", flat},
      {"tp_pp", "pp=2,tp=2", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat},
      {"tp_ep", "ep=2,tp=2", "ep=S0,tp=P", "allreduce:tp,slice:tp:0,alltoall:ep+tp:0:1", "ep+tp=S1", cube},
      {"sp_ep", "dp=2,sp=2", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube},
      {"pp_sp", "sp=2,pp=2", "pp=@0,sp=S0", "allgather:sp:0,send:pp", "pp=@1,sp=R", flat},
      {"pp_ep", "pp=2,ep=2", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", flat},
      // 2 ranks.
      {"tp_sp", "tp=2", "tp=P", "allreduce:tp", "tp=S1", flat},
      {"tp_pp", "pp=2,tp=1", "pp=@0,tp=P", "allreduce:tp,send:pp", "pp=@1,tp=R", flat},
      {"sp_ep", "dp=1,sp=2", "dp=S0,sp=S1", "allgather:sp:1,slice:sp:0,alltoall:dp+sp:0:2", "dp+sp=S2", cube},
      {"pp_ep", "pp=2,ep=1", "pp=@0,ep=S0", "send:pp,alltoall:ep:0:1", "pp=@1,ep=S1", flat},
  };
  std::vector<ChainCase> fitting;
  for (auto& c : all) {
    Mesh mesh;
    if (Mesh::parse(c.mesh, world, mesh).isOk()) fitting.push_back(c);
  }
  return fitting;
}

/// Row-major linear index of `coords` in `shape`.
inline std::int64_t linearIndex(const std::vector<std::int64_t>& coords, const std::vector<std::int64_t>& shape) {
  std::int64_t index = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + coords[d];
  return index;
}

/// Calls `visit(localIndex, logicalLinearIndex)` for every element of `rank`'s part of a
/// tensor of `spec` placed as `layout` (nothing when the rank holds none).
template <typename Visit>
void forEachLocal(const Layout& layout, const TensorSpec& spec, int rank, Visit visit) {
  if (!layout.holds(rank)) return;
  const Box box = layout.rankBox(rank, spec);
  const auto shape = layout.localShape(spec);
  std::vector<std::int64_t> coords(box.offset);
  const std::int64_t count = box.volume();
  for (std::int64_t local = 0; local < count; ++local) {
    visit(static_cast<std::size_t>(local), linearIndex(coords, spec.shape));
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      const auto du = static_cast<std::size_t>(d);
      if (++coords[du] < box.offset[du] + box.extent[du]) break;
      coords[du] = box.offset[du];
    }
  }
}

/// The contribution of partial-group member `member` to logical element `index`.
inline double contribution(int member, std::int64_t index) {
  return patternValue(0x5eed, member, static_cast<std::size_t>(index), 16);
}

/// The logical value of element `index`: the sum of the contributions of the `members`
/// partial copies (1 when the start layout has no partial axis).
inline double logicalValue(int members, std::int64_t index) {
  double sum = 0;
  for (int m = 0; m < members; ++m) sum += contribution(m, index);
  return sum;
}

/// This rank's input for a tensor of `spec` placed as `from`: each partial copy holds its
/// own contribution, replicas hold equal data.
inline std::vector<std::uint64_t> makeInput(const Layout& from, const TensorSpec& spec, int rank) {
  const std::size_t count =
      from.holds(rank) ? static_cast<std::size_t>(from.localBytes(spec)) / dataTypeSize(spec.dtype) : 0;
  std::vector<std::uint64_t> buffer = makeBuffer(count, spec.dtype);
  const int member = from.mesh().groupIndex(rank, from.axesOfKind(Placement::Kind::Partial));
  forEachLocal(from, spec, rank, [&](std::size_t local, std::int64_t index) {
    storeElement(buffer.data(), local, spec.dtype, contribution(member, index));
  });
  return buffer;
}

/// Number of elements of this rank's part of `layout` that differ from `scale` times the
/// logical value (the consumed layout has no partial axis).
inline int countWrong(const void* output, const Layout& layout, const TensorSpec& spec, int rank, int members,
                      double scale) {
  int wrong = 0;
  forEachLocal(layout, spec, rank, [&](std::size_t local, std::int64_t index) {
    if (loadElement(output, local, spec.dtype) != scale * logicalValue(members, index)) ++wrong;
  });
  return wrong;
}

}  // namespace chimera::testing
