// SPDX-License-Identifier: Apache-2.0
// Filling a typed buffer from a value function and counting elements that differ from an
// expected-value function, for any runtime DataType.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "element_codec.hpp"

namespace chimera::bench {

/// buffer[i] = valueAt(i) stored as `dtype`, for i < count.
template <typename ValueFn>
void fillBuffer(void* buffer, DataType dtype, std::size_t count, ValueFn&& valueAt) {
  dispatchDataType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::Type;
    T* out = static_cast<T*>(buffer);
    for (std::size_t i = 0; i < count; ++i) out[i] = encodeElement<T>(valueAt(i));
  });
}

/// Number of i < count where buffer[i] differs from expectedAt(i) stored as `dtype`
/// (a NaN always differs).
template <typename ExpectedFn>
std::uint64_t countMismatches(const void* buffer, DataType dtype, std::size_t count, ExpectedFn&& expectedAt) {
  return dispatchDataType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::Type;
    const T* in = static_cast<const T*>(buffer);
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double expected = decodeElement(encodeElement<T>(expectedAt(i)));
      if (!(decodeElement(in[i]) == expected)) ++wrong;
    }
    return wrong;
  });
}

/// Overwrites `bytes` bytes with 0xFF (NaN for the float types, -1 for signed integers,
/// 255 for u8) so a result that was never written shows up as wrong.
inline void poisonBuffer(void* buffer, std::size_t bytes) { std::memset(buffer, 0xFF, bytes); }

}  // namespace chimera::bench
