// SPDX-License-Identifier: Apache-2.0
// Pipelined fused plans: a chain's tensor split into chunks along one dim, the fused plan run
// once per chunk, so that the phases of a hand-off (ReduceScatter on one stage, the shard
// send, the AllGather on the next) overlap across chunks. The cost model picks the chunk
// count (docs/planner.md, "Pipelined plans").
#pragma once

#include <cstddef>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/executor.hpp"
#include "chimera/planning/planner.hpp"
#include "chimera/planning/topology_cost.hpp"
#include "chimera/status.hpp"

namespace chimera {

/// The chunk count chosen for a chain and the model's predictions behind it.
struct PipelineChoice {
  int dim = -1;                   ///< the tensor dim the chunks split (pipelineDim); -1: a scalar tensor
  int chunks = 1;                 ///< 1 = the fused plan as is
  double pipelinedSeconds = 0;    ///< predicted time with `chunks` chunks
  double unpipelinedSeconds = 0;  ///< predicted time of the fused plan of the whole tensor
};

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

/// Runs a chain's fused plan chunk by chunk on an executor: for each chunk, this rank's
/// part of the input is packed (a pointer offset when it is one contiguous run), the fused
/// plan of the chunk tensor runs (ChainMode::Fused, cached by the executor), and the result
/// is unpacked into this rank's output (or written in place when contiguous). Same buffers
/// and errors as Executor::runChain. Scratch for one chunk's input and output is allocated
/// on first use and kept.
class PipelinedChain {
 public:
  /// A pipeline of `chunks` chunks (>= 1) of `request` on `executor` / `backend`, which must
  /// outlive it.
  PipelinedChain(Executor& executor, Backend& backend, ChainRequest request, int chunks);
  ~PipelinedChain();
  PipelinedChain(const PipelinedChain&) = delete;
  PipelinedChain& operator=(const PipelinedChain&) = delete;

  /// Runs the pipeline, ordered on `stream` (as Executor::runChain). InvalidArgument when the
  /// chunk count does not divide the dim's extent / pipelineBlocks; collective like
  /// Executor::runChain.
  [[nodiscard]] Status run(const void* input, std::size_t inputBytes, void* output, std::size_t outputBytes,
                           Stream stream = nullptr);

  /// The chunk count.
  int chunks() const { return chunks_; }

 private:
  Status prepare();
  Executor& executor_;
  Backend& backend_;
  ChainRequest request_;
  ChainRequest chunkRequest_;
  int chunks_ = 1;
  int dim_ = -1;
  std::int64_t blocks_ = 1;
  bool inContiguous_ = true;
  bool outContiguous_ = true;
  bool prepared_ = false;
  void* scratchIn_ = nullptr;
  void* scratchOut_ = nullptr;
};

}  // namespace chimera
