// SPDX-License-Identifier: Apache-2.0
// Pipelined fused plans: the chunk dim of a chain, the model's chunk count, and running
// the fused plan chunk by chunk so that phases on different ranks overlap.
#include "chimera/planning/pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <utility>

#include "chimera/planning/cost_model.hpp"
#include "core/check.hpp"

namespace chimera {

namespace {

// How many blocks `layout` splits `dim` into (1 when whole).
std::int64_t splitCount(const Layout& layout, int dim) {
  std::int64_t count = 1;
  for (const int axis : layout.splitAxes(dim)) count *= layout.mesh().axis(axis).size;
  return count;
}

// The layouts a chunk must respect: the start, every op's result and the consumed layout.
std::vector<const Layout*> chainLayouts(const ChainPlan& plan) {
  std::vector<const Layout*> layouts;
  for (const Layout& layout : plan.trace.layouts) layouts.push_back(&layout);
  layouts.push_back(&plan.consumed);
  return layouts;
}

// Chunk c's part of a local tensor of `shape` whose `dim` the layout splits into `split` of
// the chain's `blocks` blocks: `dim` viewed as [blocks / split, chunks, rest], box [all, c, all].
struct ChunkView {
  std::vector<std::int64_t> shape;  // the local shape with `dim` expanded into three
  Box box;
  bool contiguous = false;  // one run at offset c x (bytes / chunks)
};

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

// Whether every chunk of a holder of `layout` is one contiguous run of its local tensor, when
// `dim` is cut into chunks of the chain's `blocks` blocks (every layout's split count divides
// them and the extent).
bool chunksContiguous(const Layout& layout, const TensorSpec& spec, int dim, std::int64_t blocks) {
  return chunkView(layout.localShape(spec), dim, blocks, splitCount(layout, dim), 1, 0).contiguous;
}

// What chunking along `dim` copies at one end of the chain (its start or consumed layout):
// each holder's whole local tensor, unless its chunks are contiguous runs (0 bytes).
struct ChunkEnd {
  std::int64_t copiedBytes = 0;
  int ranks = 0;  // the holders, who copy at once
};

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

}  // namespace

std::int64_t pipelineBlocks(const ChainPlan& plan, int dim) {
  std::int64_t blocks = 1;
  for (const Layout* layout : chainLayouts(plan)) blocks = std::lcm(blocks, splitCount(*layout, dim));
  return blocks;
}

std::int64_t pipelineCopyBytes(const ChainPlan& plan, const TensorSpec& spec, int dim) {
  std::int64_t bytes = 0;
  for (const ChunkEnd& end : chunkEnds(plan, spec, dim)) bytes += end.copiedBytes;
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
  const Topology& topology = cost.model().topology();
  const bool overlaps = topology.fabric != Fabric::SharedMemory;
  seconds = overlaps ? sum + (chunks - 1) * slowest : chunks * sum;
  // Chunks that are not contiguous runs of a rank's tensor are packed before (start) or
  // unpacked after (consumed) their plan, by that end's holders: one pass over those bytes
  // in all, a launch per chunk.
  if (chunks > 1) {
    for (const ChunkEnd& end : chunkEnds(plan, spec, dim)) {
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
