// SPDX-License-Identifier: Apache-2.0
// Host copies into a large output that is written once and read later: non-temporal stores
// where the CPU has them (SSE2, every x86-64), so that the output's cache lines are not first
// read from memory only to be overwritten, and the output does not evict what is being read.
// Halves the memory traffic of a 1 GiB routed expansion; worth it only past the caches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace chimera::detail {

/// Outputs from this size on are written with streamCopy (smaller ones stay in the caches).
inline constexpr std::size_t kStreamCopyMinBytes = std::size_t{8} << 20;

/// Copies `bytes` from `src` to `dst`, with non-temporal stores where `dst` and `bytes` are
/// 16-byte aligned; memcpy otherwise. Call streamFence() after the last one, before another
/// thread or process reads `dst`.
inline void streamCopy(std::byte* dst, const std::byte* src, std::size_t bytes) {
#if defined(__SSE2__)
  if ((reinterpret_cast<std::uintptr_t>(dst) & 15u) == 0 && bytes % 16 == 0) {
    for (std::size_t i = 0; i < bytes; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    }
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

/// Orders the non-temporal stores of streamCopy before every later store.
inline void streamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace chimera::detail
