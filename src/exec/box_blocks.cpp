// SPDX-License-Identifier: Apache-2.0
// Implements the executor's geometry: collective blocks of a tensor and contiguous boxes.
#include "exec/box_blocks.hpp"

#include <fmt/format.h>

#include "box/box_index.hpp"
#include "box/box_ops.hpp"
#include "core/check.hpp"

namespace chimera::detail {

Status checkGroup(const Mesh& mesh, AxisSet axes) {
  CHIMERA_CHECK_ARG(!axes.empty(), "collective over an empty axis set");
  CHIMERA_CHECK_ARG((axes.bits() & ~mesh.allAxes().bits()) == 0, "axis set {:#x} names axes the mesh {} lacks",
                    axes.bits(), mesh.toString());
  return Status::ok();
}

Status splitBlocks(const std::vector<std::int64_t>& shape, int dim, int n, std::vector<Box>& out) {
  CHIMERA_CHECK_ARG(dim >= 0 && dim < static_cast<int>(shape.size()), "dim {} of a {}-dimensional tensor", dim,
                    shape.size());
  const std::int64_t extent = shape[static_cast<std::size_t>(dim)];
  CHIMERA_CHECK_ARG(n >= 1 && extent % n == 0, "dim {} of extent {} does not split into {} blocks", dim, extent, n);
  out.clear();
  for (int g = 0; g < n; ++g) {
    Box box;
    box.offset.assign(shape.size(), 0);
    box.extent = shape;
    box.offset[static_cast<std::size_t>(dim)] = g * (extent / n);
    box.extent[static_cast<std::size_t>(dim)] = extent / n;
    out.push_back(std::move(box));
  }
  return Status::ok();
}

bool blocksContiguous(const std::vector<std::int64_t>& shape, int dim) {
  for (int d = 0; d < dim; ++d) {
    if (shape[static_cast<std::size_t>(d)] != 1) return false;
  }
  return true;
}

Status contiguousOffset(const std::vector<std::int64_t>& shape, const Box& box, std::size_t elementSize,
                        std::size_t& byteOffset, bool& contiguous, std::size_t* runBytes) {
  TensorBox tensorBox;
  CHIMERA_RETURN_IF_ERROR(toTensorBox(shape, box, tensorBox));
  const BoxRuns runs = boxRuns(tensorBox);
  contiguous = runs.numRuns == 1;
  byteOffset = static_cast<std::size_t>(runs.base) * elementSize;
  if (runBytes != nullptr) *runBytes = static_cast<std::size_t>(runs.runLength) * elementSize;
  return Status::ok();
}

}  // namespace chimera::detail
