// SPDX-License-Identifier: Apache-2.0
// Overflow-checked size arithmetic (private): every byte count derived from a caller's
// element count, shape or rank count goes through these, so that a size that does not fit
// is an InvalidArgument naming it instead of a wrapped value, a negative memcpy length or
// an exception out of an allocator.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

#include "chimera/status.hpp"

namespace chimera::detail {

/// Largest byte count chimera accepts for one buffer: what a pointer difference can hold.
inline constexpr std::size_t kMaxBufferBytes = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

/// `a * b` into `out`; false (out untouched) when it overflows.
inline bool checkedMul(std::size_t a, std::size_t b, std::size_t& out) { return !__builtin_mul_overflow(a, b, &out); }
/// `a + b` into `out`; false (out untouched) when it overflows.
inline bool checkedAdd(std::size_t a, std::size_t b, std::size_t& out) { return !__builtin_add_overflow(a, b, &out); }
/// Signed 64-bit forms, for shapes and model sizes.
inline bool checkedMul(std::int64_t a, std::int64_t b, std::int64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
inline bool checkedAdd(std::int64_t a, std::int64_t b, std::int64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}

/// Bytes of `count` elements of `elementSize` bytes, times `parts` (a group size: the whole
/// send buffer of a ReduceScatter, the receive buffer of an AllGather). InvalidArgument
/// "<what>: N elements x S bytes x P do not fit in a buffer" when the product overflows or
/// exceeds kMaxBufferBytes.
[[nodiscard]] inline Status bufferBytes(std::size_t count, std::size_t elementSize, std::size_t parts,
                                        std::string_view what, std::size_t& out) {
  std::size_t perPart = 0;
  std::size_t total = 0;
  if (!checkedMul(count, elementSize, perPart) || !checkedMul(perPart, parts, total) || total > kMaxBufferBytes) {
    return Status::invalidArgument(
        fmt::format("{}: {} elements x {} bytes{} do not fit in one buffer (at most {} bytes)", what, count,
                    elementSize, parts == 1 ? std::string() : fmt::format(" x {} ranks", parts), kMaxBufferBytes));
  }
  out = total;
  return Status::ok();
}

}  // namespace chimera::detail
