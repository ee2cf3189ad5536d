// SPDX-License-Identifier: Apache-2.0
// The cost model's price of a pipelined fused plan (pipeline.hpp) and its choice of the chunk
// count (docs/planner.md, "Pipelined plans").
#pragma once

#include "chimera/chain.hpp"
#include "chimera/layout.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera {

/// The chunk count chosen for a chain and the model's predictions behind it.
struct PipelineChoice {
  int dim = -1;                   ///< the tensor dim the chunks split (pipelineDim); -1: a scalar tensor
  int chunks = 1;                 ///< 1 = the fused plan as is
  double pipelinedSeconds = 0;    ///< predicted time with `chunks` chunks
  double unpipelinedSeconds = 0;  ///< predicted time of the fused plan of the whole tensor
};

/// Predicted time of running the fused plan of `spec`'s chunk tensor `chunks` times as a
/// pipeline: with s_i the predicted time of step i of the chunk's plan, chunk c runs step i
/// while chunk c+1 runs step i-1, so time = sum_i s_i + (chunks - 1) x max_i s_i. On a
/// shared-memory fabric (one bus, shared cores) nothing overlaps: chunks x sum_i s_i. With
/// more than one chunk, the chunks' packs and unpacks (pipelineCopyBytes) add one pass over
/// those bytes by the holders of that end (localPassSeconds) and a launch per chunk and end.
[[nodiscard]] Status predictPipeline(const TensorSpec& spec, const Layout& from, const Chain& chain,
                                     const Layout& consumed, int dim, int chunks, const TopologyCost& cost,
                                     double& seconds);

/// Chooses the chunk count among 1, 2, 4, ... up to `maxChunks` (those dividing the dim's
/// extent / pipelineBlocks) with the lowest predictPipeline; ties go to fewer chunks.
[[nodiscard]] Status choosePipeline(const ChainPlan& plan, const TensorSpec& spec, const TopologyCost& cost,
                                    int maxChunks, PipelineChoice& out);

}  // namespace chimera
