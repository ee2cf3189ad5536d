// SPDX-License-Identifier: Apache-2.0
// The one place a runtime DataType becomes a compile-time element type (device code).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>

#include "chimera/status.hpp"
#include "chimera/types.hpp"

namespace chimera::detail {

/// Carries an element type to a generic lambda: `[&](auto tag) { using T = typename decltype(tag)::Type; }`.
template <typename T>
struct TypeTag {
  using Type = T;
};

/// Calls `f(TypeTag<T>{})` with the device element type of `dtype` (float, double, __half,
/// __nv_bfloat16, int32_t, int64_t, uint8_t) and returns its Status. InvalidArgument for a
/// value outside the DataType enumeration.
template <typename F>
Status dispatchDataType(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::F32: return f(TypeTag<float>{});
    case DataType::F64: return f(TypeTag<double>{});
    case DataType::F16: return f(TypeTag<__half>{});
    case DataType::BF16: return f(TypeTag<__nv_bfloat16>{});
    case DataType::I32: return f(TypeTag<std::int32_t>{});
    case DataType::I64: return f(TypeTag<std::int64_t>{});
    case DataType::U8: return f(TypeTag<std::uint8_t>{});
  }
  return Status::invalidArgument(fmt::format("unknown DataType value {}", static_cast<int>(dtype)));
}

/// The unsigned integer type of `kBytes` bytes. Data movement instantiates on it: a pack
/// copies bits, never values, so -0.0 and NaN payloads survive bit for bit, and the four
/// element sizes need four instantiations, not seven.
template <std::size_t kBytes>
struct UintOfSize;
template <>
struct UintOfSize<1> {
  using Type = std::uint8_t;
};
template <>
struct UintOfSize<2> {
  using Type = std::uint16_t;
};
template <>
struct UintOfSize<4> {
  using Type = std::uint32_t;
};
template <>
struct UintOfSize<8> {
  using Type = std::uint64_t;
};

}  // namespace chimera::detail
