// SPDX-License-Identifier: Apache-2.0
// Row-major int64 tensors of the N-rank simulator (tests only). Values are integers so that
// every reduction order gives the same result and any misplaced element is visible.
#pragma once

#include <cstdint>
#include <vector>

#include "chimera/tensor_spec.hpp"

namespace chimera::sim {

/// A rank's local tensor.
struct LocalTensor {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> data;

  /// A tensor of `shape` filled with `value`.
  static LocalTensor filled(std::vector<std::int64_t> shape, std::int64_t value);
  std::int64_t numElements() const;
  bool operator==(const LocalTensor&) const = default;
};

/// Value marking an element no step has written.
inline constexpr std::int64_t kUnwritten = INT64_MIN;

/// The elements of `box` (local coordinates of `tensor`).
LocalTensor extract(const LocalTensor& tensor, const Box& box);
/// Writes `piece` into `box` of `tensor`.
void insert(LocalTensor& tensor, const Box& box, const LocalTensor& piece);
/// Block `index` of `n` equal blocks along `dim`.
LocalTensor chunk(const LocalTensor& tensor, int dim, int n, int index);
/// Concatenation along `dim`.
LocalTensor concat(const std::vector<LocalTensor>& parts, int dim);

}  // namespace chimera::sim
