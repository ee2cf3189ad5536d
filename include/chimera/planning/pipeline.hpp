// SPDX-License-Identifier: Apache-2.0
// Pipelined fused plans, their geometry: a chain's tensor split into chunks along one dim, the
// fused plan run once per chunk, so that the phases of a hand-off (ReduceScatter on one stage,
// the shard send, the AllGather on the next) overlap across chunks. The cost model prices a
// chunk count (pipeline_cost.hpp) and PipelinedChain runs it (pipelined_chain.hpp;
// docs/planner.md, "Pipelined plans").
#pragma once

#include <cstdint>

#include "chimera/planning/planner.hpp"
#include "chimera/status.hpp"
#include "chimera/tensor_spec.hpp"

namespace chimera {

/// The blocks of `dim` that every layout of the chain (start, each op's result, consumed)
/// respects: the least common multiple of their split counts on it (1 when none splits it).
/// Chunks split each of these blocks: chunk c of n chunks holds the c-th n-th of every block,
/// so every layout's blocks are unions of blocks, each rank's part of chunk c is the c-th
/// n-th of each of its blocks, and the chain on chunk c is the chain on the chunk tensor
/// (shape[dim] / n): results stay exact.
std::int64_t pipelineBlocks(const ChainPlan& plan, int dim);

/// Bytes of one rank's tensors that chunking along `dim` packs and unpacks (PipelinedChain):
/// the local tensor of the chain's start layout unless its chunks are contiguous runs, plus
/// that of the consumed layout likewise; `spec` is the whole tensor.
std::int64_t pipelineCopyBytes(const ChainPlan& plan, const TensorSpec& spec, int dim);

/// The dim to chunk along, among dims of extent >= 2 pipelineBlocks: the one whose chunks
/// pack and unpack the fewest bytes (pipelineCopyBytes; 0 when every rank's chunks are
/// contiguous runs), then the one with the fewest blocks, then the outermost; -1 for a
/// tensor without one.
int pipelineDim(const ChainPlan& plan);

/// `spec` with shape[dim] divided by `chunks`. InvalidArgument when it does not divide.
[[nodiscard]] Status chunkSpec(const TensorSpec& spec, int dim, int chunks, TensorSpec& out);

}  // namespace chimera
