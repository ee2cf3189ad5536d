// SPDX-License-Identifier: Apache-2.0
// Pack/unpack kernels and their launchers.
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "box/box_pack.hpp"
#include "core/check.hpp"
#include "kernels/copy_split.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/dispatch.cuh"
#include "kernels/launch_config.hpp"
#include "kernels/pack.hpp"

namespace chimera::detail {
namespace {

constexpr int kWarpSize = 32;
constexpr int kVectorBytes = 16;
// A work item is one piece of one run, copied by one warp: 2 KiB = 32 lanes x 4 vectors,
// all loads of a piece in flight before its stores.
constexpr int kPieceBytes = kWarpSize * kVectorBytes * 4;
// Resident blocks per SM the pack kernel is compiled for: 4 x 256 threads caps it at 64
// registers (with 4 KiB pieces and 64-bit piece indices ptxas gave it 92-94: 2 blocks, 25%
// occupancy on an H200). 2 KiB pieces (16 registers of loads in flight) and 32-bit indices
// inside a piece fit 64 registers without spills on sm_89 and sm_90 (checked with
// -Xptxas -v); the bytes in flight per SM stay the same, spread over twice the warps.
constexpr int kMinBlocksPerSm = 4;

struct PackSegment {
  BoxRuns runs;
  std::byte* tensor;
  std::byte* packed;
  std::int64_t piecesPerRun;
};

// Passed by value (__grid_constant__): no device allocation, no host->device copy, so a
// launch can be captured into a CUDA graph. sizeof stays under the portable 4 KiB.
struct PackBatch {
  int count;
  std::int64_t firstItem[kMaxBoxesPerLaunch + 1];  // prefix sums of work items per segment
  PackSegment segment[kMaxBoxesPerLaunch];
};
static_assert(sizeof(PackBatch) < 4000, "kernel parameters must stay under 4 KiB");

// ---------------------------------------------------------------------------------------
// copyVectors<V>: one warp copies `count` aligned vectors of type V (16, 8 or 4 bytes) from
// src to dst. 16-byte vectors: each lane keeps 4 loads (64 bytes, a whole 2 KiB piece per
// warp) in flight before its stores; the narrower, misaligned paths move one vector per lane
// per step (unrolling them too made ptxas spill within the 64-register bound).
// Preconditions: src and dst aligned to sizeof(V); count * sizeof(V) <= kPieceBytes (32-bit
// indices: fewer registers than 64-bit ones).
// ---------------------------------------------------------------------------------------
template <typename V>
__device__ void copyVectors(V* __restrict__ dst, const V* __restrict__ src, int count, int lane) {
  constexpr int kUnroll = sizeof(V) == kVectorBytes ? kPieceBytes / (kWarpSize * kVectorBytes) : 1;
  for (int first = 0; first < count; first += kWarpSize * kUnroll) {
    V held[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = first + u * kWarpSize + lane;
      if (v < count) held[u] = src[v];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int v = first + u * kWarpSize + lane;
      if (v < count) dst[v] = held[u];
    }
  }
}

// ---------------------------------------------------------------------------------------
// copyPiece: one warp copies n elements of type T from src to dst.
// Preconditions: src and dst aligned to sizeof(T); no overlap; n * sizeof(T) <= kPieceBytes.
// copySplit (copy_split.cuh, shared with the CPU tests) picks the widest vector width at
// which the two addresses agree (16, 8 or 4 bytes): scalar head up to that boundary, vectors,
// scalar tail; only addresses that differ modulo 4 (possible for 1- and 2-byte elements)
// copy element by element (still coalesced across the warp). O(n / 32) steps per lane.
// ---------------------------------------------------------------------------------------
template <typename T>
__device__ void copyPiece(T* __restrict__ dst, const T* __restrict__ src, int n, int lane) {
  const CopySplit split = copySplit(reinterpret_cast<std::uintptr_t>(src), reinterpret_cast<std::uintptr_t>(dst), n,
                                    static_cast<int>(sizeof(T)));
  const int head = static_cast<int>(split.head);
  const int vectors = static_cast<int>(split.vectors);
  for (int i = lane; i < head; i += kWarpSize) dst[i] = src[i];
  switch (split.width) {
    case 16:
      copyVectors(reinterpret_cast<uint4*>(dst + head), reinterpret_cast<const uint4*>(src + head), vectors, lane);
      break;
    case 8:
      copyVectors(reinterpret_cast<uint2*>(dst + head), reinterpret_cast<const uint2*>(src + head), vectors, lane);
      break;
    case 4:
      copyVectors(reinterpret_cast<unsigned*>(dst + head), reinterpret_cast<const unsigned*>(src + head), vectors,
                  lane);
      break;
    default: break;  // everything was head
  }
  const int done = head + vectors * (split.width / static_cast<int>(sizeof(T)));
  for (int i = done + lane; i < n; i += kWarpSize) dst[i] = src[i];
}

// ---------------------------------------------------------------------------------------
// boxCopyKernel<T, kPack>: pack (tensor -> packed) or unpack (packed -> tensor) of up to
// kMaxBoxesPerLaunch boxes. T is the unsigned type of the element size (bits are copied).
// Work: every run of every box is cut into pieces of <= 2 KiB; warps take pieces
// grid-stride, so one launch balances boxes of any shapes. Per piece O(ndims) 64-bit
// divisions locate the run (src/box/box_index.hpp), amortised over up to 2 KiB.
// Preconditions: pointers aligned to sizeof(T); packed and tensor ranges disjoint; for
// unpack, boxes of one launch disjoint in their tensors. Runs shorter than a warp leave
// lanes idle: such packs are latency-bound (the planner should keep runs long).
// ---------------------------------------------------------------------------------------
template <typename T, bool kPack>
__global__ void __launch_bounds__(kThreadsPerBlock, kMinBlocksPerSm)
    boxCopyKernel(const __grid_constant__ PackBatch batch) {
  const std::int64_t thread = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const std::int64_t warps = std::int64_t{gridDim.x} * blockDim.x / kWarpSize;
  const std::int64_t totalItems = batch.firstItem[batch.count];
  constexpr std::int64_t kPieceElements = kPieceBytes / sizeof(T);
  int s = 0;
  for (std::int64_t item = thread / kWarpSize; item < totalItems; item += warps) {
    while (item >= batch.firstItem[s + 1]) ++s;  // items only grow: segments move forward
    const PackSegment& segment = batch.segment[s];
    const std::int64_t local = item - batch.firstItem[s];
    const std::int64_t run = local / segment.piecesPerRun;
    const std::int64_t start = (local - run * segment.piecesPerRun) * kPieceElements;
    const int n = static_cast<int>(min(kPieceElements, segment.runs.runLength - start));
    T* tensor = reinterpret_cast<T*>(segment.tensor) + runOffset(segment.runs, run) + start;
    T* packed = reinterpret_cast<T*>(segment.packed) + run * segment.runs.runLength + start;
    if constexpr (kPack) {
      copyPiece<T>(packed, tensor, n, lane);
    } else {
      copyPiece<T>(tensor, packed, n, lane);
    }
  }
}

bool overlaps(const std::byte* a, std::size_t aBytes, const std::byte* b, std::size_t bBytes) {
  return a < b + bBytes && b < a + aBytes;
}

Status checkCopy(const BoxCopy& copy, std::size_t index, std::size_t elementSize) {
  const Status boxStatus = validateBox(copy.box);
  if (!boxStatus.isOk()) return Status::invalidArgument(fmt::format("copy {}: {}", index, boxStatus.message()));
  CHIMERA_CHECK_ARG(copy.tensor != nullptr && copy.packed != nullptr, "copy {}: null tensor or packed pointer", index);
  const auto tensorAddress = reinterpret_cast<std::uintptr_t>(copy.tensor);
  const auto packedAddress = reinterpret_cast<std::uintptr_t>(copy.packed);
  CHIMERA_CHECK_ARG(tensorAddress % elementSize == 0 && packedAddress % elementSize == 0,
                    "copy {}: tensor {} / packed {} not aligned to the {}-byte element", index, copy.tensor,
                    copy.packed, elementSize);
  const auto tensorBytes = static_cast<std::size_t>(tensorVolume(copy.box)) * elementSize;
  const auto packedBytes = static_cast<std::size_t>(boxVolume(copy.box)) * elementSize;
  CHIMERA_CHECK_ARG(
      !overlaps(static_cast<std::byte*>(copy.tensor), tensorBytes, static_cast<std::byte*>(copy.packed), packedBytes),
      "copy {}: packed buffer overlaps the tensor", index);
  return Status::ok();
}

// Fills one batch from `copies` (at most kMaxBoxesPerLaunch) and launches it.
template <typename T, bool kPack>
Status launchBatch(const BoxCopy* copies, std::size_t count, cudaStream_t stream) {
  PackBatch batch{};
  batch.count = static_cast<int>(count);
  constexpr std::int64_t kPieceElements = kPieceBytes / sizeof(T);
  for (std::size_t i = 0; i < count; ++i) {
    PackSegment& segment = batch.segment[i];
    segment.runs = boxRuns(copies[i].box);
    segment.tensor = static_cast<std::byte*>(copies[i].tensor);
    segment.packed = static_cast<std::byte*>(copies[i].packed);
    segment.piecesPerRun = (segment.runs.runLength + kPieceElements - 1) / kPieceElements;
    batch.firstItem[i + 1] = batch.firstItem[i] + segment.runs.numRuns * segment.piecesPerRun;
  }
  unsigned blocks = 0;
  CHIMERA_RETURN_IF_ERROR(gridBlocks(batch.firstItem[count] * kWarpSize, blocks));
  boxCopyKernel<T, kPack><<<blocks, kThreadsPerBlock, 0, stream>>>(batch);
  CHIMERA_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

template <bool kPack>
Status boxCopies(const BoxCopy* copies, std::size_t count, DataType dtype, void* stream) {
  if (count == 0) return Status::ok();
  CHIMERA_CHECK_ARG(copies != nullptr, "null copy list with {} copies", count);
  const std::size_t elementSize = dataTypeSize(dtype);
  for (std::size_t i = 0; i < count; ++i) CHIMERA_RETURN_IF_ERROR(checkCopy(copies[i], i, elementSize));
  return dispatchDataType(dtype, [&](auto tag) -> Status {
    using Bits = typename UintOfSize<sizeof(typename decltype(tag)::Type)>::Type;
    for (std::size_t first = 0; first < count; first += kMaxBoxesPerLaunch) {
      const std::size_t n = std::min<std::size_t>(kMaxBoxesPerLaunch, count - first);
      CHIMERA_RETURN_IF_ERROR((launchBatch<Bits, kPack>(copies + first, n, static_cast<cudaStream_t>(stream))));
    }
    return Status::ok();
  });
}

}  // namespace

Status packBoxes(const BoxCopy* copies, std::size_t count, DataType dtype, void* stream) {
  return boxCopies<true>(copies, count, dtype, stream);
}

Status unpackBoxes(const BoxCopy* copies, std::size_t count, DataType dtype, void* stream) {
  return boxCopies<false>(copies, count, dtype, stream);
}

}  // namespace chimera::detail
