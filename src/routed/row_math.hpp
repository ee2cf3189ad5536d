// SPDX-License-Identifier: Apache-2.0
// Host row arithmetic of the routed exchange (private): the weighted sums and dot products of
// combine and its backward, over F32, F64, F16 and BF16 rows, in one fixed order so that every
// program sums a token's terms the same way. 16-bit rows compute in float and round to nearest
// even after every product and every sum, as a framework's 16-bit tensor ops do; their dot
// products accumulate in float and round once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "chimera/types.hpp"
#include "common/half.hpp"

namespace chimera::detail {

/// One 16-bit element as stored (binary16 or bfloat16 bit pattern).
struct Half {
  std::uint16_t bits;
};
struct Bf16 {
  std::uint16_t bits;
};

/// How a row element of storage type S is computed with: Compute is the arithmetic type,
/// load/store convert (store rounds to nearest even for the 16-bit types).
template <typename S>
struct Element {
  using Compute = S;
  static Compute load(S v) { return v; }
  static S store(Compute v) { return v; }
};
template <>
struct Element<Half> {
  using Compute = float;
  static float load(Half v) { return halfToFloat(v.bits); }
  static Half store(float v) { return Half{floatToHalf(v)}; }
};
template <>
struct Element<Bf16> {
  using Compute = float;
  static float load(Bf16 v) { return bf16ToFloat(v.bits); }
  static Bf16 store(float v) { return Bf16{floatToBf16(v)}; }
};

/// Calls f.template operator()<S>() with S the storage type of `dtype` (F32, F64, F16, BF16).
template <typename F>
void withRowType(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::F64: f.template operator()<double>(); break;
    case DataType::F16: f.template operator()<Half>(); break;
    case DataType::BF16: f.template operator()<Bf16>(); break;
    default: f.template operator()<float>(); break;
  }
}

/// Reads weight `index` of `weights` (any row type; null: 1).
inline double readWeight(const void* weights, DataType dtype, std::int64_t index) {
  if (weights == nullptr) return 1.0;
  double value = 0;
  withRowType(dtype, [&]<typename S>() {
    value = static_cast<double>(Element<S>::load(static_cast<const S*>(weights)[index]));
  });
  return value;
}

/// Writes `value` as weight `index` of `weights` (rounded to the weight type).
inline void writeWeight(void* weights, DataType dtype, std::int64_t index, double value) {
  withRowType(dtype, [&]<typename S>() {
    using C = typename Element<S>::Compute;
    static_cast<S*>(weights)[index] = Element<S>::store(static_cast<C>(value));
  });
}

/// out[i] = w * in[i] (first term) or out[i] += w * in[i], in the row's type; `w` is the weight
/// as stored, rounded to the row type (a float weight multiplies a float row in float).
template <typename S>
void accumulateRow(S* out, const S* in, double w, std::int64_t n, bool first) {
  using E = Element<S>;
  using C = typename E::Compute;
  const C weight = E::load(E::store(static_cast<C>(w)));
  if (first) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = E::store(weight * E::load(in[i]));
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      out[i] = E::store(E::load(out[i]) + E::load(E::store(weight * E::load(in[i]))));
  }
}

/// out[i] += in[i].
template <typename S>
void addRow(S* out, const S* in, std::int64_t n) {
  using E = Element<S>;
  for (std::int64_t i = 0; i < n; ++i) out[i] = E::store(E::load(out[i]) + E::load(in[i]));
}

/// sum over i of a[i] * b[i], accumulated in the compute type in index order.
template <typename S>
double dotRow(const S* a, const S* b, std::int64_t n) {
  using E = Element<S>;
  typename E::Compute sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += E::load(a[i]) * E::load(b[i]);
  return static_cast<double>(sum);
}

}  // namespace chimera::detail
