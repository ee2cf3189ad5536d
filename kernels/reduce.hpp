// SPDX-License-Identifier: Apache-2.0
// Device element-wise reduction of several local buffers and scaling (private;
// host-callable, no CUDA headers). Used to combine partial results that already sit on one
// GPU (e.g. the local step of a hierarchical reduction) without a collective.
#pragma once

#include <cstddef>

#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Inputs one reduce launch reads; more inputs are folded in over several launches.
inline constexpr int kMaxReduceInputs = 16;

/// output[i] = op(inputs[0][i], ..., inputs[numInputs-1][i]) for i < count, in input order.
/// Avg divides the sum by numInputs (integers truncate toward zero, as NCCL). Integer Sum
/// and Prod wrap modulo 2^bits at every step (matching common/host_reduce). f16/bf16 are
/// combined in float and rounded once to nearest even (so they may be more exact than a
/// pairwise fold that rounds after every step). `output` may be exactly one of the first
/// kMaxReduceInputs inputs; no partial overlaps. Ordered on `stream` (cudaStream_t; nullptr = legacy default);
/// never synchronises; capturable. Errors: InvalidArgument (numInputs < 1, null pointer
/// with count > 0, pointer not aligned to the element, partial overlap), BackendError.
[[nodiscard]] Status reduceBuffers(const void* const* inputs, int numInputs, void* output, std::size_t count,
                                   DataType dtype, ReduceOp op, void* stream);

/// output[i] = input[i] * factor for i < count. Floating types multiply in float (f16,
/// bf16, f32) or double (f64) and round once; integer types compute in double, truncate
/// toward zero and saturate to the type's range. In place when input == output. Same stream
/// semantics as reduceBuffers. Errors: InvalidArgument (null/misaligned pointer, partial
/// overlap, non-finite factor for an integer type), BackendError.
[[nodiscard]] Status scaleBuffer(const void* input, void* output, std::size_t count, DataType dtype, double factor,
                                 void* stream);

}  // namespace chimera::detail
