// SPDX-License-Identifier: Apache-2.0
// Runs a pipelined fused plan: the fused plan chunk by chunk, so that phases on different ranks
// overlap.
#include "chimera/planning/pipelined_chain.hpp"

#include <utility>
#include <vector>

#include "chimera/planning/pipeline.hpp"
#include "core/check.hpp"
#include "planner/pipeline_chunks.hpp"

namespace chimera {

using detail::chunksContiguous;
using detail::ChunkView;
using detail::chunkView;
using detail::splitCount;

PipelinedChain::PipelinedChain(Executor& executor, Backend& backend, ChainRequest request, int chunks)
    : executor_(executor), backend_(backend), request_(std::move(request)), chunks_(chunks) {}

PipelinedChain::~PipelinedChain() {
  backend_.deallocate(scratchIn_);
  backend_.deallocate(scratchOut_);
}

Status PipelinedChain::prepare() {
  CHIMERA_CHECK_ARG(chunks_ >= 1, "a pipeline needs at least 1 chunk, got {}", chunks_);
  const ChainPlan* plan = nullptr;
  CHIMERA_RETURN_IF_ERROR(executor_.plan(request_, plan));
  chunkRequest_ = request_;
  chunkRequest_.consume = plan->consumed;
  if (chunks_ > 1) {
    dim_ = pipelineDim(*plan);
    CHIMERA_CHECK_ARG(dim_ >= 0, "chain '{}' cannot be pipelined: no dim of extent >= 2",
                      request_.chain.toString(request_.from.mesh()));
    blocks_ = pipelineBlocks(*plan, dim_);
    const std::int64_t extent = request_.spec.shape[static_cast<std::size_t>(dim_)];
    CHIMERA_CHECK_ARG(extent % (blocks_ * chunks_) == 0,
                      "{} chunks do not divide the {} blocks of dim {} (extent {}) that the chain's layouts split",
                      chunks_, blocks_, dim_, extent);
    CHIMERA_RETURN_IF_ERROR(chunkSpec(request_.spec, dim_, chunks_, chunkRequest_.spec));
    const int rank = backend_.rank();
    const Layout& from = request_.from;
    const Layout& to = plan->consumed;
    if (from.holds(rank)) {
      inContiguous_ = chunksContiguous(from, request_.spec, dim_, blocks_);
      if (!inContiguous_) {
        CHIMERA_RETURN_IF_ERROR(
            backend_.allocate(static_cast<std::size_t>(from.localBytes(chunkRequest_.spec)), &scratchIn_));
      }
    }
    if (to.holds(rank)) {
      outContiguous_ = chunksContiguous(to, request_.spec, dim_, blocks_);
      if (!outContiguous_) {
        CHIMERA_RETURN_IF_ERROR(
            backend_.allocate(static_cast<std::size_t>(to.localBytes(chunkRequest_.spec)), &scratchOut_));
      }
    }
  }
  prepared_ = true;
  return Status::ok();
}

Status PipelinedChain::run(const void* input, std::size_t inputBytes, void* output, std::size_t outputBytes,
                           Stream stream) {
  if (!prepared_) CHIMERA_RETURN_IF_ERROR(prepare());
  if (chunks_ == 1) {
    return executor_.runChain(request_, ChainMode::Fused, input, inputBytes, output, outputBytes, stream);
  }
  const int rank = backend_.rank();
  const Layout& from = request_.from;
  const Layout& to = *chunkRequest_.consume;
  const bool holdsIn = from.holds(rank);
  const bool holdsOut = to.holds(rank);
  const auto inBytes = holdsIn ? static_cast<std::size_t>(from.localBytes(request_.spec)) : 0;
  const auto outBytes = holdsOut ? static_cast<std::size_t>(to.localBytes(request_.spec)) : 0;
  CHIMERA_CHECK_ARG(inputBytes >= inBytes && (inBytes == 0 || input != nullptr),
                    "input buffer of {} bytes is smaller than this rank's {} bytes", inputBytes, inBytes);
  CHIMERA_CHECK_ARG(outputBytes >= outBytes && (outBytes == 0 || output != nullptr),
                    "output buffer of {} bytes is smaller than this rank's {} bytes", outputBytes, outBytes);
  const std::size_t chunkIn = inBytes / static_cast<std::size_t>(chunks_);
  const std::size_t chunkOut = outBytes / static_cast<std::size_t>(chunks_);
  const std::vector<std::int64_t> inShape = holdsIn ? from.localShape(request_.spec) : std::vector<std::int64_t>{};
  const std::vector<std::int64_t> outShape = holdsOut ? to.localShape(request_.spec) : std::vector<std::int64_t>{};
  const DataType dtype = request_.spec.dtype;
  for (int c = 0; c < chunks_; ++c) {
    const void* in = nullptr;
    void* out = nullptr;
    if (holdsIn) {
      if (inContiguous_) {
        in = static_cast<const unsigned char*>(input) + c * chunkIn;
      } else {
        const ChunkView view = chunkView(inShape, dim_, blocks_, splitCount(from, dim_), chunks_, c);
        CHIMERA_RETURN_IF_ERROR(backend_.packBox(input, view.shape, view.box, scratchIn_, dtype, stream));
        in = scratchIn_;
      }
    }
    if (holdsOut) out = outContiguous_ ? static_cast<unsigned char*>(output) + c * chunkOut : scratchOut_;
    CHIMERA_RETURN_IF_ERROR(executor_.runChain(chunkRequest_, ChainMode::Fused, in, holdsIn ? chunkIn : 0, out,
                                               holdsOut ? chunkOut : 0, stream));
    if (holdsOut && !outContiguous_) {
      const ChunkView view = chunkView(outShape, dim_, blocks_, splitCount(to, dim_), chunks_, c);
      CHIMERA_RETURN_IF_ERROR(backend_.unpackBox(scratchOut_, output, view.shape, view.box, dtype, stream));
    }
  }
  return Status::ok();
}

}  // namespace chimera
