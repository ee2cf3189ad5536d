// SPDX-License-Identifier: Apache-2.0
// Host conversions between float and the 16-bit float formats (IEEE binary16 "half" and
// bfloat16), rounding to nearest, ties to even. NaN stays NaN (quiet), infinities and
// signed zeros are kept, half subnormals are produced and read exactly.
#pragma once

#include <bit>
#include <cstdint>

namespace chimera::detail {

/// Rounds `value` to the nearest bfloat16 (ties to even) and returns its bit pattern.
inline std::uint16_t floatToBf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t roundingBias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + roundingBias) >> 16);
}

/// The float holding bfloat16 bit pattern `bits` (exact).
inline float bf16ToFloat(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

/// Rounds `value` to the nearest IEEE binary16 (ties to even; overflow to infinity) and
/// returns its bit pattern.
inline std::uint16_t floatToHalf(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (magnitude >= 0x47800000u) {
    // >= 65536: infinity. Values in [65520, 65536) also round up to infinity below.
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  }
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal or zero. Shift the 24-bit
    // significand so one unit is 2^-24, rounding to nearest even on the dropped bits.
    if (magnitude < 0x33000000u) return sign;  // < 2^-25: rounds to zero (ties-to-even at 2^-25 too)
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;  // 14..24
    const std::uint32_t halfway = 1u << (shift - 1);
    const std::uint32_t remainder = significand & ((1u << shift) - 1u);
    std::uint32_t result = significand >> shift;
    if (remainder > halfway || (remainder == halfway && (result & 1u) != 0)) ++result;
    return static_cast<std::uint16_t>(sign | result);
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped significand bits.
  // A carry out of the significand correctly bumps the exponent (up to infinity).
  const std::uint32_t rebased = magnitude - 0x38000000u;
  const std::uint32_t roundingBias = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + roundingBias) >> 13));
}

/// The float holding binary16 bit pattern `bits` (exact, subnormals included).
inline float halfToFloat(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t significand = bits & 0x3ffu;
  if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (significand << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (significand << 13));
  // Zero or subnormal: significand * 2^-24, exact in float.
  const float magnitude = static_cast<float>(significand) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

}  // namespace chimera::detail
