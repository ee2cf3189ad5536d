// SPDX-License-Identifier: Apache-2.0
// Element storage for every DataType on the host: encode a value into a buffer element,
// decode it back, and dispatch from a runtime DataType to its storage type. f16 and bf16
// are raw 16-bit patterns converted through float by common/half.hpp (nearest even).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "chimera/types.hpp"
#include "common/half.hpp"

namespace chimera::bench {

/// IEEE 754 binary16 storage.
struct Half {
  std::uint16_t bits = 0;
};

/// bfloat16 storage (the upper half of a binary32).
struct BFloat16 {
  std::uint16_t bits = 0;
};

/// Stores `value` as element type T (f16/bf16 through float; integers by truncating cast).
template <typename T>
T encodeElement(double value) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{detail::floatToHalf(static_cast<float>(value))};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{detail::floatToBf16(static_cast<float>(value))};
  } else {
    return static_cast<T>(value);
  }
}

/// Reads element type T back as a double (exact for every type but i64 beyond 2^53).
template <typename T>
double decodeElement(T value) {
  if constexpr (std::is_same_v<T, Half>) {
    return detail::halfToFloat(value.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return detail::bf16ToFloat(value.bits);
  } else {
    return static_cast<double>(value);
  }
}

/// A value of this type carries the storage type of a DataType to a generic lambda.
template <typename T>
struct TypeTag {
  using Type = T;
};

/// Calls `fn(TypeTag<T>{})` with T the host storage type of `type`; returns what fn returns.
template <typename Fn>
decltype(auto) dispatchDataType(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::F32: return std::forward<Fn>(fn)(TypeTag<float>{});
    case DataType::F64: return std::forward<Fn>(fn)(TypeTag<double>{});
    case DataType::F16: return std::forward<Fn>(fn)(TypeTag<Half>{});
    case DataType::BF16: return std::forward<Fn>(fn)(TypeTag<BFloat16>{});
    case DataType::I32: return std::forward<Fn>(fn)(TypeTag<std::int32_t>{});
    case DataType::I64: return std::forward<Fn>(fn)(TypeTag<std::int64_t>{});
    case DataType::U8: break;
  }
  return std::forward<Fn>(fn)(TypeTag<std::uint8_t>{});
}

}  // namespace chimera::bench
