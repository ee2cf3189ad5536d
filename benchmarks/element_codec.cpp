// SPDX-License-Identifier: Apache-2.0
#include "element_codec.hpp"

#include <bit>

namespace chimera::bench {

Half floatToHalf(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t exponent = (bits >> 23) & 0xFFu;
  std::uint32_t mantissa = bits & 0x7FFFFFu;
  if (exponent == 0xFFu) {  // infinity or NaN (keep NaN quiet and non-zero)
    return Half{static_cast<std::uint16_t>(sign | 0x7C00u | (mantissa != 0 ? 0x200u : 0u))};
  }
  const int halfExponent = static_cast<int>(exponent) - 127 + 15;
  if (halfExponent >= 0x1F) return Half{static_cast<std::uint16_t>(sign | 0x7C00u)};
  if (halfExponent <= 0) {
    // Subnormal or zero in binary16: shift the full significand (implicit 1 included).
    if (halfExponent < -10) return Half{sign};
    mantissa |= 0x800000u;
    const int shift = 14 - halfExponent;
    std::uint32_t result = mantissa >> shift;
    const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;
    return Half{static_cast<std::uint16_t>(sign | result)};
  }
  std::uint32_t result = (static_cast<std::uint32_t>(halfExponent) << 10) | (mantissa >> 13);
  const std::uint32_t remainder = mantissa & 0x1FFFu;
  // A carry out of the mantissa correctly bumps the exponent (up to infinity).
  if (remainder > 0x1000u || (remainder == 0x1000u && (result & 1u))) ++result;
  return Half{static_cast<std::uint16_t>(sign | result)};
}

float halfToFloat(Half value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (value.bits >> 10) & 0x1Fu;
  std::uint32_t mantissa = value.bits & 0x3FFu;
  if (exponent == 0x1Fu) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Normalise a subnormal: binary16 subnormals are normal in binary32.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3FFu;
    const auto floatExponent = static_cast<std::uint32_t>(127 - 15 + 1 - shift);
    return std::bit_cast<float>(sign | (floatExponent << 23) | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

BFloat16 floatToBFloat16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x7FFFFFu) != 0) {
    return BFloat16{static_cast<std::uint16_t>((bits >> 16) | 0x40u)};
  }
  const std::uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return BFloat16{static_cast<std::uint16_t>((bits + rounding) >> 16)};
}

float bfloat16ToFloat(BFloat16 value) { return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16); }

}  // namespace chimera::bench
