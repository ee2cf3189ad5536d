// SPDX-License-Identifier: Apache-2.0
// Typed element-wise reductions and scaling over host memory, for every DataType and ReduceOp. Used by
// the MPI backend's own collective algorithms and by the plan executor's host path.
//
// Semantics: Avg is accumulated as Sum; the caller finishes it once with `divideByCount`
// (integer types truncate toward zero, like NCCL). Integer Sum/Prod wrap modulo 2^bits.
// f16/bf16 are widened to float, combined, and rounded back to nearest even per call.
#pragma once

#include <cstddef>

#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// dst[i] = op(dst[i], src[i]) for i < count. `dst` and `src` must not overlap.
void reduceInto(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op);

/// dst[i] = op(a[i], b[i]) for i < count. `dst` may equal `a` or `b` exactly (no partial
/// overlap); `a` and `b` may be the same buffer.
void reduceTo(void* dst, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOp op);

/// buf[i] = buf[i] / divisor for i < count (Avg finalisation). Integer types truncate
/// toward zero. `divisor` >= 1; 1 leaves the buffer unchanged.
void divideByCount(void* buf, std::size_t count, DataType dtype, int divisor);

/// Backend::scale over host memory, with the CUDA scaleBuffer's rounding rules: f16/bf16/f32
/// multiply in float, f64 in double, integers in double truncated toward zero and saturated.
[[nodiscard]] Status hostScale(const void* input, void* output, std::size_t count, DataType dtype, double factor);

}  // namespace chimera::detail
