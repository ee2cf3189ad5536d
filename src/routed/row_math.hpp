// SPDX-License-Identifier: Apache-2.0
// Host row arithmetic of the routed exchange (private): the weighted sums and dot products of
// combine and its backward, over F32 and F64 rows, in one fixed order so that every program
// sums a token's terms the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "chimera/types.hpp"

namespace chimera::detail {

/// Reads weight `index` of `weights` (F32 or F64; null: 1).
inline double readWeight(const void* weights, DataType dtype, std::int64_t index) {
  if (weights == nullptr) return 1.0;
  if (dtype == DataType::F64) return static_cast<const double*>(weights)[index];
  return static_cast<const float*>(weights)[index];
}

/// Writes `value` as weight `index` of `weights` (F32 or F64).
inline void writeWeight(void* weights, DataType dtype, std::int64_t index, double value) {
  if (dtype == DataType::F64) {
    static_cast<double*>(weights)[index] = value;
  } else {
    static_cast<float*>(weights)[index] = static_cast<float>(value);
  }
}

/// out[i] = w * in[i] (first term) or out[i] += w * in[i], in the row's type; `w` is the weight
/// as stored (a float weight multiplies a float row in float).
template <typename T>
void accumulateRow(T* out, const T* in, double w, std::int64_t n, bool first) {
  const T weight = static_cast<T>(w);
  if (first) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = weight * in[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] += weight * in[i];
  }
}

/// out[i] += in[i].
template <typename T>
void addRow(T* out, const T* in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] += in[i];
}

/// sum over i of a[i] * b[i], accumulated in the row's type in index order.
template <typename T>
T dotRow(const T* a, const T* b, std::int64_t n) {
  T sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

/// Calls f.template operator()<T>() with T = float for F32, double for F64.
template <typename F>
void withRowType(DataType dtype, F&& f) {
  if (dtype == DataType::F64) {
    f.template operator()<double>();
  } else {
    f.template operator()<float>();
  }
}

}  // namespace chimera::detail
