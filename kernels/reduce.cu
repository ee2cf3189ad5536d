// SPDX-License-Identifier: Apache-2.0
// Multi-buffer reduce and scale kernels and their launchers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/check.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/dispatch.cuh"
#include "kernels/launch_config.hpp"
#include "kernels/reduce.hpp"

namespace chimera::detail {
namespace {

constexpr int kVectorBytes = 16;

// How an element type is widened for arithmetic and narrowed back.
template <typename T>
struct ElementMath {
  using Acc = T;
  static __device__ Acc load(T value) { return value; }
  static __device__ T store(Acc value) { return value; }
};
template <>
struct ElementMath<__half> {
  using Acc = float;
  static __device__ Acc load(__half value) { return __half2float(value); }
  static __device__ __half store(Acc value) { return __float2half_rn(value); }
};
template <>
struct ElementMath<__nv_bfloat16> {
  using Acc = float;
  static __device__ Acc load(__nv_bfloat16 value) { return __bfloat162float(value); }
  static __device__ __nv_bfloat16 store(Acc value) { return __float2bfloat16_rn(value); }
};

// Integers combine through their unsigned counterpart so Sum/Prod wrap (signed overflow is
// undefined). Min/Max use the same expressions as std::min/std::max (NaN order included).
template <ReduceOp kOp, typename Acc>
__device__ Acc combine(Acc a, Acc b) {
  if constexpr (kOp == ReduceOp::Sum || kOp == ReduceOp::Avg || kOp == ReduceOp::Prod) {
    if constexpr (std::is_integral_v<Acc>) {
      using U = std::common_type_t<std::make_unsigned_t<Acc>, unsigned>;
      const U x = static_cast<U>(a);
      const U y = static_cast<U>(b);
      return static_cast<Acc>(kOp == ReduceOp::Prod ? static_cast<U>(x * y) : static_cast<U>(x + y));
    } else {
      return kOp == ReduceOp::Prod ? a * b : a + b;
    }
  } else if constexpr (kOp == ReduceOp::Min) {
    return b < a ? b : a;
  } else {
    return a < b ? b : a;
  }
}

template <typename T>
struct ReduceArgs {
  const T* input[kMaxReduceInputs];
  T* output;
  int numInputs;
  int avgDivisor;        // used by ReduceOp::Avg only
  std::int64_t head;     // scalar elements before the first 16-byte boundary
  std::int64_t vectors;  // 16-byte vectors after the head
  std::int64_t count;    // all elements (head + vectors + scalar tail)
};

template <typename T, ReduceOp kOp>
__device__ T reduceElement(const ReduceArgs<T>& args, std::int64_t i) {
  using M = ElementMath<T>;
  auto acc = M::load(args.input[0][i]);
  for (int k = 1; k < args.numInputs; ++k) acc = combine<kOp>(acc, M::load(args.input[k][i]));
  if constexpr (kOp == ReduceOp::Avg) acc = acc / static_cast<decltype(acc)>(args.avgDivisor);
  return M::store(acc);
}

// ---------------------------------------------------------------------------------------
// reduceKernel<T, kOp>: output[i] = op over the inputs of element i.
// Preconditions: pointers aligned to sizeof(T); output equal to an input or disjoint from
// all. The vector body needs every pointer at the same offset modulo 16 (head/vectors say
// so; else head == count and the loop is scalar). Grid-stride; O(count * numInputs) loads.
// ---------------------------------------------------------------------------------------
template <typename T, ReduceOp kOp>
__global__ void __launch_bounds__(kThreadsPerBlock) reduceKernel(const __grid_constant__ ReduceArgs<T> args) {
  using M = ElementMath<T>;
  constexpr int kPerVector = kVectorBytes / sizeof(T);
  struct alignas(kVectorBytes) Vector {
    T lane[kPerVector];
  };
  const std::int64_t first = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = first; i < args.head; i += stride) args.output[i] = reduceElement<T, kOp>(args, i);
  for (std::int64_t v = first; v < args.vectors; v += stride) {
    typename M::Acc acc[kPerVector];
    const Vector in0 = reinterpret_cast<const Vector*>(args.input[0] + args.head)[v];
#pragma unroll
    for (int j = 0; j < kPerVector; ++j) acc[j] = M::load(in0.lane[j]);
    for (int k = 1; k < args.numInputs; ++k) {
      const Vector in = reinterpret_cast<const Vector*>(args.input[k] + args.head)[v];
#pragma unroll
      for (int j = 0; j < kPerVector; ++j) acc[j] = combine<kOp>(acc[j], M::load(in.lane[j]));
    }
    Vector out;
#pragma unroll
    for (int j = 0; j < kPerVector; ++j) {
      if constexpr (kOp == ReduceOp::Avg) acc[j] = acc[j] / static_cast<typename M::Acc>(args.avgDivisor);
      out.lane[j] = M::store(acc[j]);
    }
    reinterpret_cast<Vector*>(args.output + args.head)[v] = out;
  }
  for (std::int64_t i = args.head + args.vectors * kPerVector + first; i < args.count; i += stride) {
    args.output[i] = reduceElement<T, kOp>(args, i);
  }
}

template <typename T>
__device__ T scaleElement(T value, double factor) {
  if constexpr (std::is_integral_v<T>) {
    const double scaled = trunc(static_cast<double>(value) * factor);
    // (double)max + 1 is exact for 8/32-bit types and rounds to 2^63 for int64: the first
    // value that no longer fits.
    if (scaled >= static_cast<double>(std::numeric_limits<T>::max()) + 1.0) return std::numeric_limits<T>::max();
    if (scaled < static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    return static_cast<T>(scaled);
  } else {
    using M = ElementMath<T>;
    return M::store(M::load(value) * static_cast<typename M::Acc>(factor));
  }
}

// ---------------------------------------------------------------------------------------
// scaleKernel<T>: output[i] = input[i] * factor (see scaleBuffer for rounding).
// Preconditions as reduceKernel with one input. Grid-stride; O(count).
// ---------------------------------------------------------------------------------------
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    scaleKernel(const T* input, T* output, std::int64_t head, std::int64_t vectors, std::int64_t count, double factor) {
  constexpr int kPerVector = kVectorBytes / sizeof(T);
  struct alignas(kVectorBytes) Vector {
    T lane[kPerVector];
  };
  const std::int64_t first = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = first; i < head; i += stride) output[i] = scaleElement(input[i], factor);
  for (std::int64_t v = first; v < vectors; v += stride) {
    Vector value = reinterpret_cast<const Vector*>(input + head)[v];
#pragma unroll
    for (int j = 0; j < kPerVector; ++j) value.lane[j] = scaleElement(value.lane[j], factor);
    reinterpret_cast<Vector*>(output + head)[v] = value;
  }
  for (std::int64_t i = head + vectors * kPerVector + first; i < count; i += stride) {
    output[i] = scaleElement(input[i], factor);
  }
}

// Splits `count` elements at `pointers` into a scalar head, 16-byte vectors and a scalar
// tail. Vectors only when every pointer sits at the same offset modulo 16.
void vectorSplit(const void* const* pointers, int n, std::int64_t count, std::size_t elementSize, std::int64_t& head,
                 std::int64_t& vectors) {
  const auto misalignment = reinterpret_cast<std::uintptr_t>(pointers[0]) % kVectorBytes;
  head = count;
  vectors = 0;
  for (int k = 1; k < n; ++k) {
    if (reinterpret_cast<std::uintptr_t>(pointers[k]) % kVectorBytes != misalignment) return;
  }
  head = std::min<std::int64_t>(count,
                                static_cast<std::int64_t>((kVectorBytes - misalignment) % kVectorBytes / elementSize));
  vectors = (count - head) / static_cast<std::int64_t>(kVectorBytes / elementSize);
}

Status checkBuffer(const void* pointer, const char* what, int index, std::size_t elementSize) {
  CHIMERA_CHECK_ARG(pointer != nullptr, "{} {} is null", what, index);
  CHIMERA_CHECK_ARG(reinterpret_cast<std::uintptr_t>(pointer) % elementSize == 0,
                    "{} {} at {} is not aligned to the {}-byte element", what, index, pointer, elementSize);
  return Status::ok();
}

// Exact aliasing is fine (each element is read before it is written by the same thread);
// a partial overlap would read elements another thread already wrote.
Status checkNoPartialOverlap(const void* input, int index, const void* output, std::size_t bytes) {
  const auto* a = static_cast<const std::byte*>(input);
  const auto* b = static_cast<const std::byte*>(output);
  CHIMERA_CHECK_ARG(a == b || a >= b + bytes || b >= a + bytes, "input {} partially overlaps the output", index);
  return Status::ok();
}

template <typename T, ReduceOp kOp>
Status launchReduce(const ReduceArgs<T>& args, cudaStream_t stream) {
  unsigned blocks = 0;
  constexpr std::int64_t kPerVector = kVectorBytes / sizeof(T);
  CHIMERA_RETURN_IF_ERROR(gridBlocks(std::max(args.vectors, args.count - args.vectors * kPerVector), blocks));
  reduceKernel<T, kOp><<<blocks, kThreadsPerBlock, 0, stream>>>(args);
  CHIMERA_CUDA_RETURN(cudaGetLastError());
  return Status::ok();
}

template <typename T>
Status launchReduceOp(const ReduceArgs<T>& args, ReduceOp op, cudaStream_t stream) {
  switch (op) {
    case ReduceOp::Sum: return launchReduce<T, ReduceOp::Sum>(args, stream);
    case ReduceOp::Prod: return launchReduce<T, ReduceOp::Prod>(args, stream);
    case ReduceOp::Min: return launchReduce<T, ReduceOp::Min>(args, stream);
    case ReduceOp::Max: return launchReduce<T, ReduceOp::Max>(args, stream);
    case ReduceOp::Avg: return launchReduce<T, ReduceOp::Avg>(args, stream);
  }
  return Status::invalidArgument(fmt::format("unknown ReduceOp value {}", static_cast<int>(op)));
}

// Folds the inputs in launches of up to kMaxReduceInputs; after the first, the running
// result (output) is input 0 of the next launch. Avg sums until the last launch divides.
template <typename T>
Status reduceTyped(const void* const* inputs, int numInputs, void* output, std::int64_t count, ReduceOp op,
                   cudaStream_t stream) {
  ReduceArgs<T> args{};
  args.output = static_cast<T*>(output);
  args.count = count;
  args.avgDivisor = numInputs;
  int next = 0;
  while (next < numInputs) {
    int n = 0;
    if (next > 0) args.input[n++] = args.output;
    while (n < kMaxReduceInputs && next < numInputs) args.input[n++] = static_cast<const T*>(inputs[next++]);
    args.numInputs = n;
    const void* pointers[kMaxReduceInputs + 1];
    std::copy(args.input, args.input + n, pointers);
    pointers[n] = args.output;
    vectorSplit(pointers, n + 1, count, sizeof(T), args.head, args.vectors);
    const bool last = next == numInputs;
    CHIMERA_RETURN_IF_ERROR(launchReduceOp<T>(args, op == ReduceOp::Avg && !last ? ReduceOp::Sum : op, stream));
  }
  return Status::ok();
}

}  // namespace

Status reduceBuffers(const void* const* inputs, int numInputs, void* output, std::size_t count, DataType dtype,
                     ReduceOp op, void* stream) {
  CHIMERA_CHECK_ARG(numInputs >= 1, "reduce needs at least one input, got {}", numInputs);
  CHIMERA_CHECK_ARG(!(dtype == DataType::U8 && op == ReduceOp::Avg && numInputs > 255),
                    "uint8 avg over {} inputs: the divisor does not fit in uint8", numInputs);
  if (count == 0) return Status::ok();
  CHIMERA_CHECK_ARG(inputs != nullptr, "null input list with {} inputs", numInputs);
  const std::size_t elementSize = dataTypeSize(dtype);
  CHIMERA_RETURN_IF_ERROR(checkBuffer(output, "output", 0, elementSize));
  for (int k = 0; k < numInputs; ++k) {
    CHIMERA_RETURN_IF_ERROR(checkBuffer(inputs[k], "input", k, elementSize));
    CHIMERA_RETURN_IF_ERROR(checkNoPartialOverlap(inputs[k], k, output, count * elementSize));
    // Later launches read the running result from `output`: an input it aliases must have
    // been consumed by the first launch.
    CHIMERA_CHECK_ARG(k < kMaxReduceInputs || inputs[k] != output,
                      "output aliases input {}; only inputs 0..{} may be the output", k, kMaxReduceInputs - 1);
  }
  return dispatchDataType(dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::Type;
    return reduceTyped<T>(inputs, numInputs, output, static_cast<std::int64_t>(count), op,
                          static_cast<cudaStream_t>(stream));
  });
}

Status scaleBuffer(const void* input, void* output, std::size_t count, DataType dtype, double factor, void* stream) {
  if (count == 0) return Status::ok();
  const std::size_t elementSize = dataTypeSize(dtype);
  CHIMERA_RETURN_IF_ERROR(checkBuffer(input, "input", 0, elementSize));
  CHIMERA_RETURN_IF_ERROR(checkBuffer(output, "output", 0, elementSize));
  CHIMERA_RETURN_IF_ERROR(checkNoPartialOverlap(input, 0, output, count * elementSize));
  const bool integral = dtype == DataType::I32 || dtype == DataType::I64 || dtype == DataType::U8;
  CHIMERA_CHECK_ARG(!integral || std::isfinite(factor), "scale factor {} is not finite for integer type {}", factor,
                    dataTypeName(dtype));
  return dispatchDataType(dtype, [&](auto tag) -> Status {
    using T = typename decltype(tag)::Type;
    const void* pointers[2] = {input, output};
    std::int64_t head = 0;
    std::int64_t vectors = 0;
    const auto n = static_cast<std::int64_t>(count);
    vectorSplit(pointers, 2, n, sizeof(T), head, vectors);
    unsigned blocks = 0;
    constexpr std::int64_t kPerVector = kVectorBytes / sizeof(T);
    CHIMERA_RETURN_IF_ERROR(gridBlocks(std::max(vectors, n - vectors * kPerVector), blocks));
    scaleKernel<T><<<blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const T*>(input), static_cast<T*>(output), head, vectors, n, factor);
    CHIMERA_CUDA_RETURN(cudaGetLastError());
    return Status::ok();
  });
}

}  // namespace chimera::detail
