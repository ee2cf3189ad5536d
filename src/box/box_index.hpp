// SPDX-License-Identifier: Apache-2.0
// Index math for boxes (rectangular sub-blocks) of row-major tensors, shared by the CUDA
// pack/unpack kernels and the host pack path (box_pack.hpp), so both use the very
// same arithmetic. Usable from g++ (host) and nvcc (host and device); no CUDA headers.
//
// A box is described in elements: per dimension the tensor's extent, the box's offset and
// the box's extent. Its elements, in row-major order, form the "packed" (contiguous) box.
// A box reads and writes in "runs": maximal stretches contiguous in the tensor. The run
// length is the innermost extent after merging dimensions the box covers fully (or spans
// one index of), so copy loops move whole runs instead of single elements.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CHIMERA_HD __host__ __device__
#else
#define CHIMERA_HD
#endif

namespace chimera {

/// Most tensor dimensions a box may have.
inline constexpr int kMaxBoxDims = 8;

/// A rectangular block of a row-major tensor, in elements. Dimension 0 is outermost.
struct TensorBox {
  /// Number of dimensions, 1..kMaxBoxDims.
  int ndims = 0;
  /// Extent of the whole tensor in each dimension (>= 1).
  std::int64_t dims[kMaxBoxDims] = {};
  /// First index of the box in each dimension (0 <= offset < dims).
  std::int64_t offset[kMaxBoxDims] = {};
  /// Extent of the box in each dimension (>= 1, offset + extent <= dims).
  std::int64_t extent[kMaxBoxDims] = {};
};

/// A valid box in the form copy loops use: dimensions merged as far as the layout allows,
/// tensor strides precomputed. Built by `boxRuns`.
struct BoxRuns {
  /// Dimensions left after merging (>= 1). The last one is the run dimension.
  int ndims = 0;
  /// Element offset in the tensor of the box's first element.
  std::int64_t base = 0;
  /// Elements per run (extent of the merged innermost dimension).
  std::int64_t runLength = 0;
  /// Number of runs (product of the merged outer extents).
  std::int64_t numRuns = 0;
  /// Box extent per merged dimension.
  std::int64_t extent[kMaxBoxDims] = {};
  /// Tensor stride (elements) per merged dimension; stride[ndims - 1] == 1.
  std::int64_t stride[kMaxBoxDims] = {};
};

/// Why `box` is invalid, as a static message naming the rule, or nullptr when it is valid.
/// Rules: 1 <= ndims <= kMaxBoxDims; per dimension dims >= 1, extent >= 1, offset >= 0,
/// offset + extent <= dims; the tensor's element count fits in int64.
CHIMERA_HD inline const char* boxError(const TensorBox& box) {
  if (box.ndims < 1 || box.ndims > kMaxBoxDims) return "ndims must be in 1..8";
  std::int64_t volume = 1;
  for (int d = 0; d < box.ndims; ++d) {
    if (box.dims[d] < 1) return "tensor extent must be >= 1";
    if (box.extent[d] < 1) return "box extent must be >= 1";
    if (box.offset[d] < 0) return "box offset must be >= 0";
    if (box.offset[d] > box.dims[d] - box.extent[d]) return "box offset + extent exceeds the tensor extent";
    if (volume > INT64_MAX / box.dims[d]) return "tensor element count overflows int64";
    volume *= box.dims[d];
  }
  return nullptr;
}

/// Number of elements in the box (the packed size). Precondition: boxError(box) == nullptr.
CHIMERA_HD inline std::int64_t boxVolume(const TensorBox& box) {
  std::int64_t volume = 1;
  for (int d = 0; d < box.ndims; ++d) volume *= box.extent[d];
  return volume;
}

/// Number of elements of the whole tensor. Precondition: boxError(box) == nullptr.
CHIMERA_HD inline std::int64_t tensorVolume(const TensorBox& box) {
  std::int64_t volume = 1;
  for (int d = 0; d < box.ndims; ++d) volume *= box.dims[d];
  return volume;
}

/// Merges dimensions and precomputes strides. Adjacent dimensions d, d+1 merge when the box
/// spans one index of d or all of d+1: then the pair is one dimension of the tensor's
/// extent dims[d]*dims[d+1] holding a box of offset off[d]*dims[d+1] + off[d+1] and extent
/// ext[d]*ext[d+1], still contiguous in the tensor. Precondition: boxError(box) == nullptr.
/// O(ndims).
CHIMERA_HD inline BoxRuns boxRuns(const TensorBox& box) {
  std::int64_t dims[kMaxBoxDims];
  std::int64_t offset[kMaxBoxDims];
  std::int64_t extent[kMaxBoxDims];
  int n = 0;
  for (int d = 0; d < box.ndims; ++d) {
    const bool fullInner = box.offset[d] == 0 && box.extent[d] == box.dims[d];
    if (n > 0 && (extent[n - 1] == 1 || fullInner)) {
      offset[n - 1] = offset[n - 1] * box.dims[d] + box.offset[d];
      extent[n - 1] *= box.extent[d];
      dims[n - 1] *= box.dims[d];
    } else {
      dims[n] = box.dims[d];
      offset[n] = box.offset[d];
      extent[n] = box.extent[d];
      ++n;
    }
  }
  BoxRuns runs;
  runs.ndims = n;
  std::int64_t stride = 1;
  for (int d = n - 1; d >= 0; --d) {
    runs.extent[d] = extent[d];
    runs.stride[d] = stride;
    runs.base += offset[d] * stride;
    stride *= dims[d];
  }
  runs.runLength = extent[n - 1];
  runs.numRuns = 1;
  for (int d = 0; d < n - 1; ++d) runs.numRuns *= extent[d];
  return runs;
}

/// Tensor element offset of the first element of run `run` (0 <= run < numRuns): `run`
/// split row-major over the outer merged extents. O(ndims) divisions.
CHIMERA_HD inline std::int64_t runOffset(const BoxRuns& runs, std::int64_t run) {
  std::int64_t offset = runs.base;
  for (int d = runs.ndims - 2; d >= 0; --d) {
    const std::int64_t next = run / runs.extent[d];
    offset += (run - next * runs.extent[d]) * runs.stride[d];
    run = next;
  }
  return offset;
}

/// Tensor element offset of the i-th element of the packed box (0 <= i < numRuns*runLength).
CHIMERA_HD inline std::int64_t elementOffset(const BoxRuns& runs, std::int64_t i) {
  const std::int64_t run = i / runs.runLength;
  return runOffset(runs, run) + (i - run * runs.runLength);
}

}  // namespace chimera
