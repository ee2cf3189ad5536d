// SPDX-License-Identifier: Apache-2.0
// The price of a pipelined fused plan on a topology and the choice of its chunk count.
#include "chimera/planning/pipeline_cost.hpp"

#include <algorithm>

#include "chimera/planning/cost_model.hpp"
#include "chimera/planning/pipeline.hpp"
#include "core/check.hpp"
#include "planner/pipeline_chunks.hpp"

namespace chimera {

Status predictPipeline(const TensorSpec& spec, const Layout& from, const Chain& chain, const Layout& consumed, int dim,
                       int chunks, const TopologyCost& cost, double& seconds) {
  TensorSpec piece;
  CHIMERA_RETURN_IF_ERROR(chunkSpec(spec, dim, chunks, piece));
  ChainPlan plan;
  CHIMERA_RETURN_IF_ERROR(planChain(piece, from, chain, consumed, cost, plan));
  CommProgram program;
  CHIMERA_RETURN_IF_ERROR(planProgram(plan.fused, program, cost.model().topology().movesBoxes));
  double sum = 0;
  double slowest = 0;
  for (const CommStep& step : program) {
    StepCost stepCost;
    CHIMERA_RETURN_IF_ERROR(cost.model().predictStep(step, stepCost));
    sum += stepCost.seconds;
    slowest = std::max(slowest, stepCost.seconds);
  }
  // Chunk c+1's step i-1 runs while chunk c's step i does, on other ranks and links. On
  // one shared memory bus (the host fabric) every step uses the same resource and the
  // same cores, so nothing overlaps: the chunks run one after another.
  const Topology& topology = cost.model().topology();
  const bool overlaps = topology.fabric != Fabric::SharedMemory;
  seconds = overlaps ? sum + (chunks - 1) * slowest : chunks * sum;
  // Chunks that are not contiguous runs of a rank's tensor are packed before (start) or
  // unpacked after (consumed) their plan, by that end's holders: one pass over those bytes
  // in all, a launch per chunk.
  if (chunks > 1) {
    for (const detail::ChunkEnd& end : detail::chunkEnds(plan, spec, dim)) {
      if (end.copiedBytes == 0) continue;
      seconds += localPassSeconds(topology, static_cast<double>(end.copiedBytes), end.ranks);
      seconds += chunks * topology.device.launchSeconds;
    }
  }
  return Status::ok();
}

Status choosePipeline(const ChainPlan& plan, const TensorSpec& spec, const TopologyCost& cost, int maxChunks,
                      PipelineChoice& out) {
  PipelineChoice choice;
  choice.dim = pipelineDim(plan);
  choice.unpipelinedSeconds = plan.fusedCost.value;
  choice.pipelinedSeconds = plan.fusedCost.value;
  if (choice.dim >= 0) {
    const Layout& from = plan.trace.layouts.front();
    const std::int64_t extent = spec.shape[static_cast<std::size_t>(choice.dim)] / pipelineBlocks(plan, choice.dim);
    for (int chunks = 2; chunks <= maxChunks && extent % chunks == 0; chunks *= 2) {
      double seconds = 0;
      CHIMERA_RETURN_IF_ERROR(
          predictPipeline(spec, from, Chain{plan.trace.ops}, plan.consumed, choice.dim, chunks, cost, seconds));
      if (seconds < choice.pipelinedSeconds) {
        choice.pipelinedSeconds = seconds;
        choice.chunks = chunks;
      }
    }
  }
  out = choice;
  return Status::ok();
}

}  // namespace chimera
