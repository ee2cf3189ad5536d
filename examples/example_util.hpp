// SPDX-License-Identifier: Apache-2.0
// Small helpers shared by the examples: timing, integer-valued inputs, agreement on a verdict,
// and reading back the part of a buffer a consumer reads. Public chimera API only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "chimera/backend.hpp"
#include "chimera/layout.hpp"
#include "chimera/session.hpp"

namespace example {

/// Exits with a message when a chimera call failed (examples keep error handling short).
inline void check(const chimera::Status& status, const char* what) {
  if (status.isOk()) return;
  std::fprintf(stderr, "%s: %s\n", what, status.toString().c_str());
  std::exit(1);
}

/// Microseconds since `start`.
inline double microsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

/// Median of `values`.
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

/// Small integers as floats, from (seed, rank, index): every sum of them is exact.
inline void fill(std::vector<float>& buffer, int seed, int rank) {
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    buffer[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(seed) * 13 + static_cast<std::size_t>(rank) * 5) % 11);
  }
}

/// True on every rank when `ok` holds on every rank.
inline bool allRanks(chimera::Backend& backend, bool ok) {
  std::int32_t flag = ok ? 1 : 0;
  check(backend.allReduce(&flag, &flag, 1, chimera::DataType::I32, chimera::ReduceOp::Min, backend.mesh().allAxes()),
        "agreement");
  return flag == 1;
}

/// The elements a consumer reading `read` finds in a buffer holding `held`'s local tensor.
inline std::vector<float> consumedPart(const std::vector<float>& buffer, const chimera::Layout& held,
                                       const chimera::Layout& read, const chimera::TensorSpec& spec, int rank) {
  std::vector<float> out;
  if (!read.holds(rank)) return out;
  const chimera::Box box = read.rankBox(rank, spec).relativeTo(held.rankBox(rank, spec).offset);
  const std::vector<std::int64_t> shape = held.localShape(spec);
  const std::int64_t count = box.volume();
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t rest = i;
    std::int64_t linear = 0;
    std::int64_t stride = 1;
    for (std::size_t d = shape.size(); d-- > 0;) {
      linear += (box.offset[d] + rest % box.extent[d]) * stride;
      rest /= box.extent[d];
      stride *= shape[d];
    }
    out.push_back(buffer[static_cast<std::size_t>(linear)]);
  }
  return out;
}

/// Reads "--name value" from argv as an integer, or `fallback`.
inline long argument(int argc, char** argv, const std::string& name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (name == argv[i]) return std::atol(argv[i + 1]);
  }
  return fallback;
}

}  // namespace example
