// SPDX-License-Identifier: Apache-2.0
// The geometry of pipelined fused plans: the blocks every layout of a chain respects, the dim
// to chunk along, the chunk tensor, and where each chunk lies in a rank's local tensor.
#include "chimera/planning/pipeline.hpp"

#include <array>
#include <numeric>
#include <vector>

#include "core/check.hpp"
#include "planner/pipeline_chunks.hpp"

namespace chimera {

namespace {

// The layouts a chunk must respect: the start, every op's result and the consumed layout.
std::vector<const Layout*> chainLayouts(const ChainPlan& plan) {
  std::vector<const Layout*> layouts;
  for (const Layout& layout : plan.trace.layouts) layouts.push_back(&layout);
  layouts.push_back(&plan.consumed);
  return layouts;
}

}  // namespace

namespace detail {

std::int64_t splitCount(const Layout& layout, int dim) {
  std::int64_t count = 1;
  for (const int axis : layout.splitAxes(dim)) count *= layout.mesh().axis(axis).size;
  return count;
}

ChunkView chunkView(const std::vector<std::int64_t>& local, int dim, std::int64_t blocks, std::int64_t split,
                    int chunks, int c) {
  ChunkView view;
  const auto d = static_cast<std::size_t>(dim);
  const std::int64_t outer = blocks / split;
  const std::int64_t rest = local[d] / (outer * chunks);
  view.shape.assign(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(d));
  view.shape.insert(view.shape.end(), {outer, static_cast<std::int64_t>(chunks), rest});
  view.shape.insert(view.shape.end(), local.begin() + static_cast<std::ptrdiff_t>(d) + 1, local.end());
  view.box.offset.assign(view.shape.size(), 0);
  view.box.extent = view.shape;
  view.box.offset[d + 1] = c;
  view.box.extent[d + 1] = 1;
  view.contiguous = outer == 1;
  for (std::size_t k = 0; k < d; ++k) view.contiguous = view.contiguous && local[k] == 1;
  return view;
}

bool chunksContiguous(const Layout& layout, const TensorSpec& spec, int dim, std::int64_t blocks) {
  return chunkView(layout.localShape(spec), dim, blocks, splitCount(layout, dim), 1, 0).contiguous;
}

std::array<ChunkEnd, 2> chunkEnds(const ChainPlan& plan, const TensorSpec& spec, int dim) {
  const std::int64_t blocks = pipelineBlocks(plan, dim);
  std::array<ChunkEnd, 2> ends;
  const std::array<const Layout*, 2> layouts = {&plan.trace.layouts.front(), &plan.consumed};
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    const Layout& layout = *layouts[i];
    if (chunksContiguous(layout, spec, dim, blocks)) continue;
    ends[i] = {layout.localBytes(spec), static_cast<int>(layout.holders().size())};
  }
  return ends;
}

}  // namespace detail

std::int64_t pipelineBlocks(const ChainPlan& plan, int dim) {
  std::int64_t blocks = 1;
  for (const Layout* layout : chainLayouts(plan)) blocks = std::lcm(blocks, detail::splitCount(*layout, dim));
  return blocks;
}

std::int64_t pipelineCopyBytes(const ChainPlan& plan, const TensorSpec& spec, int dim) {
  std::int64_t bytes = 0;
  for (const detail::ChunkEnd& end : detail::chunkEnds(plan, spec, dim)) bytes += end.copiedBytes;
  return bytes;
}

int pipelineDim(const ChainPlan& plan) {
  const TensorSpec& spec = plan.fused.spec;
  int best = -1;
  std::int64_t leastCopied = 0;
  std::int64_t fewestBlocks = 0;
  for (int dim = 0; dim < spec.rank(); ++dim) {
    const std::int64_t blocks = pipelineBlocks(plan, dim);
    if (spec.shape[static_cast<std::size_t>(dim)] / blocks < 2) continue;
    const std::int64_t copied = pipelineCopyBytes(plan, spec, dim);
    if (best < 0 || copied < leastCopied || (copied == leastCopied && blocks < fewestBlocks)) {
      best = dim;
      leastCopied = copied;
      fewestBlocks = blocks;
    }
  }
  return best;
}

Status chunkSpec(const TensorSpec& spec, int dim, int chunks, TensorSpec& out) {
  CHIMERA_CHECK_ARG(dim >= 0 && dim < spec.rank(), "pipeline dim {} outside the tensor's {} dims", dim, spec.rank());
  CHIMERA_CHECK_ARG(chunks >= 1 && spec.shape[static_cast<std::size_t>(dim)] % chunks == 0,
                    "{} chunks do not divide dim {} of size {}", chunks, dim,
                    spec.shape[static_cast<std::size_t>(dim)]);
  out = spec;
  out.shape[static_cast<std::size_t>(dim)] /= chunks;
  return Status::ok();
}

}  // namespace chimera
