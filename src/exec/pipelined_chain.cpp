// SPDX-License-Identifier: Apache-2.0
// Pipelined fused plans: the chunk dim of a chain, the model's chunk count, and running
// the fused plan chunk by chunk so that phases on different ranks overlap.
#include "chimera/pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "common/check.hpp"

namespace chimera {

int pipelineDim(const ChainPlan& plan) {
  const TensorSpec& spec = plan.fused.spec;
  std::vector<const Layout*> layouts;
  for (const Layout& layout : plan.trace.layouts) layouts.push_back(&layout);
  layouts.push_back(&plan.consumed);
  for (int dim = 0; dim < spec.rank(); ++dim) {
    if (spec.shape[static_cast<std::size_t>(dim)] < 2) continue;
    const bool split = std::any_of(layouts.begin(), layouts.end(),
                                   [&](const Layout* layout) { return !layout->splitAxes(dim).empty(); });
    if (!split) return dim;
  }
  return -1;
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

Status predictPipeline(const TensorSpec& spec, const Layout& from, const Chain& chain, const Layout& consumed, int dim,
                       int chunks, const TopologyCost& cost, double& seconds) {
  TensorSpec piece;
  CHIMERA_RETURN_IF_ERROR(chunkSpec(spec, dim, chunks, piece));
  ChainPlan plan;
  CHIMERA_RETURN_IF_ERROR(planChain(piece, from, chain, consumed, cost, plan));
  CommProgram program;
  CHIMERA_RETURN_IF_ERROR(planProgram(plan.fused, program));
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
  const bool overlaps = cost.model().topology().fabric != Fabric::SharedMemory;
  seconds = overlaps ? sum + (chunks - 1) * slowest : chunks * sum;
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
    const std::int64_t extent = spec.shape[static_cast<std::size_t>(choice.dim)];
    for (int chunks = 2; chunks <= maxChunks && extent % chunks == 0; chunks *= 2) {
      double seconds = 0;
      CHIMERA_RETURN_IF_ERROR(predictPipeline(spec, from, Chain{plan.trace.ops}, plan.consumed, choice.dim, chunks,
                                              cost, seconds));
      if (seconds < choice.pipelinedSeconds) {
        choice.pipelinedSeconds = seconds;
        choice.chunks = chunks;
      }
    }
  }
  out = choice;
  return Status::ok();
}

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
  dim_ = pipelineDim(*plan);
  CHIMERA_CHECK_ARG(dim_ >= 0 || chunks_ == 1,
                    "chain '{}' cannot be pipelined: every dim of the tensor is split by one of its layouts",
                    request_.chain.toString(request_.from.mesh()));
  chunkRequest_ = request_;
  chunkRequest_.consume = plan->consumed;
  if (dim_ >= 0) CHIMERA_RETURN_IF_ERROR(chunkSpec(request_.spec, dim_, chunks_, chunkRequest_.spec));
  // Scratch only when chunks are not contiguous runs of the local tensors (dim > 0).
  const int rank = backend_.rank();
  if (chunks_ > 1 && dim_ > 0) {
    const Layout& from = request_.from;
    if (from.holds(rank)) {
      CHIMERA_RETURN_IF_ERROR(
          backend_.allocate(static_cast<std::size_t>(from.localBytes(chunkRequest_.spec)), &scratchIn_));
    }
    if (plan->consumed.holds(rank)) {
      CHIMERA_RETURN_IF_ERROR(
          backend_.allocate(static_cast<std::size_t>(plan->consumed.localBytes(chunkRequest_.spec)), &scratchOut_));
    }
  }
  prepared_ = true;
  return Status::ok();
}

Status PipelinedChain::run(const void* input, std::size_t inputBytes, void* output, std::size_t outputBytes) {
  if (!prepared_) CHIMERA_RETURN_IF_ERROR(prepare());
  if (chunks_ == 1) return executor_.runChain(request_, ChainMode::Fused, input, inputBytes, output, outputBytes);
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
  // The box of chunk c in a local tensor of `shape` (the dim is whole there: no layout splits it).
  const auto chunkBox = [&](const std::vector<std::int64_t>& shape, int c) {
    Box box;
    box.offset.assign(shape.size(), 0);
    box.extent = shape;
    const auto d = static_cast<std::size_t>(dim_);
    box.extent[d] = shape[d] / chunks_;
    box.offset[d] = c * box.extent[d];
    return box;
  };
  for (int c = 0; c < chunks_; ++c) {
    const void* in = nullptr;
    void* out = nullptr;
    if (dim_ == 0) {  // chunks are contiguous runs: no copies
      in = holdsIn ? static_cast<const unsigned char*>(input) + c * chunkIn : nullptr;
      out = holdsOut ? static_cast<unsigned char*>(output) + c * chunkOut : nullptr;
    } else {
      if (holdsIn) {
        CHIMERA_RETURN_IF_ERROR(
            backend_.packBox(input, inShape, chunkBox(inShape, c), scratchIn_, request_.spec.dtype));
      }
      in = scratchIn_;
      out = scratchOut_;
    }
    CHIMERA_RETURN_IF_ERROR(executor_.runChain(chunkRequest_, ChainMode::Fused, in, holdsIn ? chunkIn : 0, out,
                                               holdsOut ? chunkOut : 0));
    if (dim_ != 0 && holdsOut) {
      CHIMERA_RETURN_IF_ERROR(backend_.unpackBox(scratchOut_, output, outShape, chunkBox(outShape, c),
                                                 request_.spec.dtype));
    }
  }
  return Status::ok();
}

}  // namespace chimera
