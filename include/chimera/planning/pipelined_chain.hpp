// SPDX-License-Identifier: Apache-2.0
// Running a pipelined fused plan (pipeline.hpp): the chain's fused plan chunk by chunk on an
// executor, so that phases on different ranks overlap (docs/planner.md, "Pipelined plans").
#pragma once

#include <cstddef>
#include <cstdint>

#include "chimera/backend.hpp"
#include "chimera/executor.hpp"
#include "chimera/status.hpp"

namespace chimera {

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
