// SPDX-License-Identifier: Apache-2.0
// Host encoding of test values in every DataType (f16/bf16 via common/half.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "chimera/types.hpp"
#include "common/half.hpp"

namespace chimera::test {

/// Writes `value` as one element of `dtype` at `out` (float types round to nearest even;
/// integer types take the value as is, which the callers keep in range).
inline void storeValue(DataType dtype, double value, std::uint8_t* out) {
  auto put = [out](auto typed) { std::memcpy(out, &typed, sizeof typed); };
  switch (dtype) {
    case DataType::F32: return put(static_cast<float>(value));
    case DataType::F64: return put(value);
    case DataType::F16: return put(detail::floatToHalf(static_cast<float>(value)));
    case DataType::BF16: return put(detail::floatToBf16(static_cast<float>(value)));
    case DataType::I32: return put(static_cast<std::int32_t>(value));
    case DataType::I64: return put(static_cast<std::int64_t>(value));
    case DataType::U8: return put(static_cast<std::uint8_t>(value));
  }
}

/// Reads one element of `dtype` at `in` as a double (exact for every type but huge int64).
inline double loadValue(DataType dtype, const std::uint8_t* in) {
  auto get = [in](auto typed) {
    std::memcpy(&typed, in, sizeof typed);
    return typed;
  };
  switch (dtype) {
    case DataType::F32: return get(float{});
    case DataType::F64: return get(double{});
    case DataType::F16: return detail::halfToFloat(get(std::uint16_t{}));
    case DataType::BF16: return detail::bf16ToFloat(get(std::uint16_t{}));
    case DataType::I32: return get(std::int32_t{});
    case DataType::I64: return static_cast<double>(get(std::int64_t{}));
    case DataType::U8: return get(std::uint8_t{});
  }
  return 0;
}

/// Encodes `values` as a buffer of `dtype` elements.
inline std::vector<std::uint8_t> encodeValues(DataType dtype, const std::vector<double>& values) {
  const std::size_t size = dataTypeSize(dtype);
  std::vector<std::uint8_t> bytes(values.size() * size);
  for (std::size_t i = 0; i < values.size(); ++i) storeValue(dtype, values[i], bytes.data() + i * size);
  return bytes;
}

}  // namespace chimera::test
