// SPDX-License-Identifier: Apache-2.0
// Implements typed element-wise reductions and scaling over host memory.
#include "common/host_reduce.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/half.hpp"
#include "core/check.hpp"

namespace chimera::detail {
namespace {

// Combines two values of the arithmetic type T. Integers go through their unsigned
// counterpart so Sum/Prod wrap instead of overflowing (undefined for signed types).
template <typename T>
T combine(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      } else {
        return a + b;
      }
    case ReduceOp::Prod:
      if constexpr (std::is_integral_v<T>) {
        // uint8 promotes to int; multiply in a type at least as wide as unsigned int.
        using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
        return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      } else {
        return a * b;
      }
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
  }
  return a;
}

// The op is a template parameter so each inner loop is branch-free and vectorises.
template <typename T, ReduceOp kOp>
void reduceLoop(T* dst, const T* a, const T* b, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = combine(a[i], b[i], kOp);
}

// Same with the restrict promise the compiler needs to vectorise without runtime alias checks.
template <typename T, ReduceOp kOp>
void reduceLoopNoAlias(T* __restrict dst, const T* __restrict src, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = combine(dst[i], src[i], kOp);
}

// 16-bit floats: widen to float, combine, round back.
template <std::uint16_t (*kToBits)(float), float (*kToFloat)(std::uint16_t), ReduceOp kOp>
void reduceLoop16(std::uint16_t* dst, const std::uint16_t* a, const std::uint16_t* b, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = kToBits(combine(kToFloat(a[i]), kToFloat(b[i]), kOp));
}

template <typename T>
void reduceTyped(void* dst, const void* a, const void* b, std::size_t count, ReduceOp op, bool inPlace) {
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return inPlace ? reduceLoopNoAlias<T, ReduceOp::Sum>(d, y, count) : reduceLoop<T, ReduceOp::Sum>(d, x, y, count);
    case ReduceOp::Prod:
      return inPlace ? reduceLoopNoAlias<T, ReduceOp::Prod>(d, y, count)
                     : reduceLoop<T, ReduceOp::Prod>(d, x, y, count);
    case ReduceOp::Min:
      return inPlace ? reduceLoopNoAlias<T, ReduceOp::Min>(d, y, count) : reduceLoop<T, ReduceOp::Min>(d, x, y, count);
    case ReduceOp::Max:
      return inPlace ? reduceLoopNoAlias<T, ReduceOp::Max>(d, y, count) : reduceLoop<T, ReduceOp::Max>(d, x, y, count);
  }
}

template <std::uint16_t (*kToBits)(float), float (*kToFloat)(std::uint16_t)>
void reduceTyped16(void* dst, const void* a, const void* b, std::size_t count, ReduceOp op) {
  auto* d = static_cast<std::uint16_t*>(dst);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return reduceLoop16<kToBits, kToFloat, ReduceOp::Sum>(d, x, y, count);
    case ReduceOp::Prod: return reduceLoop16<kToBits, kToFloat, ReduceOp::Prod>(d, x, y, count);
    case ReduceOp::Min: return reduceLoop16<kToBits, kToFloat, ReduceOp::Min>(d, x, y, count);
    case ReduceOp::Max: return reduceLoop16<kToBits, kToFloat, ReduceOp::Max>(d, x, y, count);
  }
}

void dispatchReduce(void* dst, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOp op,
                    bool inPlace) {
  switch (dtype) {
    case DataType::F32: return reduceTyped<float>(dst, a, b, count, op, inPlace);
    case DataType::F64: return reduceTyped<double>(dst, a, b, count, op, inPlace);
    case DataType::F16: return reduceTyped16<floatToHalf, halfToFloat>(dst, a, b, count, op);
    case DataType::BF16: return reduceTyped16<floatToBf16, bf16ToFloat>(dst, a, b, count, op);
    case DataType::I32: return reduceTyped<std::int32_t>(dst, a, b, count, op, inPlace);
    case DataType::I64: return reduceTyped<std::int64_t>(dst, a, b, count, op, inPlace);
    case DataType::U8: return reduceTyped<std::uint8_t>(dst, a, b, count, op, inPlace);
  }
  CHIMERA_ASSERT(false && "unknown DataType");
}

template <typename T>
void divideTyped(void* buf, std::size_t count, int divisor) {
  auto* p = static_cast<T*>(buf);
  const auto d = static_cast<T>(divisor);
  for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / d);
}

template <std::uint16_t (*kToBits)(float), float (*kToFloat)(std::uint16_t)>
void divideTyped16(void* buf, std::size_t count, int divisor) {
  auto* p = static_cast<std::uint16_t*>(buf);
  const auto d = static_cast<float>(divisor);
  for (std::size_t i = 0; i < count; ++i) p[i] = kToBits(kToFloat(p[i]) / d);
}

}  // namespace

void reduceInto(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op) {
  dispatchReduce(dst, dst, src, count, dtype, op, /*inPlace=*/true);
}

void reduceTo(void* dst, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOp op) {
  // All ops are commutative: fold the aliased operand into the in-place (restrict) path.
  if (dst == a && dst != b) return dispatchReduce(dst, dst, b, count, dtype, op, /*inPlace=*/true);
  if (dst == b && dst != a) return dispatchReduce(dst, dst, a, count, dtype, op, /*inPlace=*/true);
  dispatchReduce(dst, a, b, count, dtype, op, /*inPlace=*/false);
}

void divideByCount(void* buf, std::size_t count, DataType dtype, int divisor) {
  CHIMERA_ASSERT(divisor >= 1);
  if (divisor == 1) return;
  switch (dtype) {
    case DataType::F32: return divideTyped<float>(buf, count, divisor);
    case DataType::F64: return divideTyped<double>(buf, count, divisor);
    case DataType::F16: return divideTyped16<floatToHalf, halfToFloat>(buf, count, divisor);
    case DataType::BF16: return divideTyped16<floatToBf16, bf16ToFloat>(buf, count, divisor);
    case DataType::I32: return divideTyped<std::int32_t>(buf, count, divisor);
    case DataType::I64: return divideTyped<std::int64_t>(buf, count, divisor);
    case DataType::U8: return divideTyped<std::uint8_t>(buf, count, divisor);
  }
  CHIMERA_ASSERT(false && "unknown DataType");
}

namespace {

template <typename T>
void scaleInteger(const void* input, void* output, std::size_t count, double factor) {
  const T* in = static_cast<const T*>(input);
  T* out = static_cast<T*>(output);
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
  for (std::size_t i = 0; i < count; ++i) {
    const double v = std::trunc(static_cast<double>(in[i]) * factor);
    // hi may round up past the type's range (int64), so compare with >=.
    out[i] = v <= lo ? std::numeric_limits<T>::min() : (v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v));
  }
}

template <typename T>
void scaleFloat(const void* input, void* output, std::size_t count, T factor) {
  const T* in = static_cast<const T*>(input);
  T* out = static_cast<T*>(output);
  for (std::size_t i = 0; i < count; ++i) out[i] = in[i] * factor;
}

template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
void scaleHalf(const void* input, void* output, std::size_t count, float factor) {
  const auto* in = static_cast<const std::uint16_t*>(input);
  auto* out = static_cast<std::uint16_t*>(output);
  for (std::size_t i = 0; i < count; ++i) out[i] = FromFloat(ToFloat(in[i]) * factor);
}

}  // namespace

Status hostScale(const void* input, void* output, std::size_t count, DataType dtype, double factor) {
  if (count == 0) return Status::ok();
  CHIMERA_CHECK_ARG(input != nullptr && output != nullptr, "scale of {} elements with a null pointer", count);
  switch (dtype) {
    case DataType::F32: scaleFloat<float>(input, output, count, static_cast<float>(factor)); break;
    case DataType::F64: scaleFloat<double>(input, output, count, factor); break;
    case DataType::F16: scaleHalf<halfToFloat, floatToHalf>(input, output, count, static_cast<float>(factor)); break;
    case DataType::BF16: scaleHalf<bf16ToFloat, floatToBf16>(input, output, count, static_cast<float>(factor)); break;
    case DataType::I32:
    case DataType::I64:
    case DataType::U8:
      CHIMERA_CHECK_ARG(std::isfinite(factor), "scale factor {} is not finite for integer type {}", factor,
                        dataTypeName(dtype));
      if (dtype == DataType::I32) scaleInteger<std::int32_t>(input, output, count, factor);
      if (dtype == DataType::I64) scaleInteger<std::int64_t>(input, output, count, factor);
      if (dtype == DataType::U8) scaleInteger<std::uint8_t>(input, output, count, factor);
      break;
  }
  return Status::ok();
}

}  // namespace chimera::detail
