// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the MPI test binaries: cross-rank verdicts and inputs that every rank
// can recompute from (seed, rank, index).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "chimera/types.hpp"
#include "common/half.hpp"

namespace chimera::testing {

/// This process's rank in MPI_COMM_WORLD.
inline int worldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

/// Number of processes in MPI_COMM_WORLD.
inline int worldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// True on every rank when `ok` is true on every rank of `comm` (logical AND over the
/// group). Collective: tests check locally, then agree, never ASSERT before a collective.
inline bool allRanksAgree(bool ok, MPI_Comm comm = MPI_COMM_WORLD) {
  int mine = ok ? 1 : 0;
  int all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_LAND, comm);
  return all != 0;
}

/// The sum of `value` over the ranks of `comm`. Collective.
inline std::uint64_t sumOverRanks(std::uint64_t value, MPI_Comm comm = MPI_COMM_WORLD) {
  std::uint64_t sum = 0;
  MPI_Allreduce(&value, &sum, 1, MPI_UINT64_T, MPI_SUM, comm);
  return sum;
}

/// The routed exchange's capacity, as a reference: whether (token t, k) of a source's routing
/// `ids` ([T, topK] global expert ids, `perRank` experts per destination rank of `ranks`)
/// survives `capacity` records per destination, records opening in token order from token
/// `begin` on, one per (token, destination rank) with `oncePerRank`, else per (token, expert).
inline bool keptByCapacity(const std::vector<std::int64_t>& ids, int topK, std::int64_t perRank, int ranks,
                           std::int64_t capacity, bool oncePerRank, std::int64_t begin, std::int64_t t, int k) {
  if (capacity == 0) return true;
  std::vector<std::int64_t> sent(static_cast<std::size_t>(ranks), 0);
  for (std::int64_t u = begin; u <= t; ++u) {
    std::vector<int> opened(sent.size(), -1);  // -1 unseen, 0 dropped, 1 kept
    for (int j = 0; j < topK; ++j) {
      const auto d = static_cast<std::size_t>(ids[static_cast<std::size_t>(u * topK + j)] / perRank);
      bool keep = false;
      if (oncePerRank && opened[d] >= 0) {
        keep = opened[d] == 1;
      } else {
        keep = sent[d] < capacity;
        sent[d] += keep ? 1 : 0;
        opened[d] = keep ? 1 : 0;
      }
      if (u == t && j == k) return keep;
    }
  }
  return false;
}

/// A well-mixed 32-bit hash of (seed, rank, index).
inline std::uint32_t patternHash(std::uint32_t seed, int rank, std::size_t index) {
  std::uint64_t x = (static_cast<std::uint64_t>(seed) << 40) ^ (static_cast<std::uint64_t>(rank) << 32) ^ index;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb3fe1a85ec53ULL;
  x ^= x >> 33;
  return static_cast<std::uint32_t>(x);
}

/// Small integer in [0, modulus) from (seed, rank, index): exact in every DataType, and so
/// are sums of up to 8 of them when modulus <= 32.
inline int patternValue(std::uint32_t seed, int rank, std::size_t index, int modulus) {
  return static_cast<int>(patternHash(seed, rank, index) % static_cast<std::uint32_t>(modulus));
}

/// Writes `value` as element `i` of a `dtype` buffer (integers wrap like the type does;
/// 16-bit floats round to nearest even).
inline void storeElement(void* buf, std::size_t i, DataType dtype, double value) {
  auto* bytes = static_cast<std::byte*>(buf) + i * dataTypeSize(dtype);
  auto put = [bytes](auto typed) { std::memcpy(bytes, &typed, sizeof(typed)); };
  switch (dtype) {
    case DataType::F32: return put(static_cast<float>(value));
    case DataType::F64: return put(value);
    case DataType::F16: return put(detail::floatToHalf(static_cast<float>(value)));
    case DataType::BF16: return put(detail::floatToBf16(static_cast<float>(value)));
    case DataType::I32: return put(static_cast<std::int32_t>(static_cast<std::int64_t>(value)));
    case DataType::I64: return put(static_cast<std::int64_t>(value));
    case DataType::U8: return put(static_cast<std::uint8_t>(static_cast<std::int64_t>(value)));
  }
}

/// Reads element `i` of a `dtype` buffer as a double (exact for every type).
inline double loadElement(const void* buf, std::size_t i, DataType dtype) {
  const auto* bytes = static_cast<const std::byte*>(buf) + i * dataTypeSize(dtype);
  auto get = [bytes](auto typed) {
    std::memcpy(&typed, bytes, sizeof(typed));
    return typed;
  };
  switch (dtype) {
    case DataType::F32: return get(0.0f);
    case DataType::F64: return get(0.0);
    case DataType::F16: return detail::halfToFloat(get(std::uint16_t{0}));
    case DataType::BF16: return detail::bf16ToFloat(get(std::uint16_t{0}));
    case DataType::I32: return static_cast<double>(get(std::int32_t{0}));
    case DataType::I64: return static_cast<double>(get(std::int64_t{0}));
    case DataType::U8: return get(std::uint8_t{0});
  }
  return 0.0;
}

/// A host buffer of `count` elements of `dtype`, 8-byte aligned.
inline std::vector<std::uint64_t> makeBuffer(std::size_t count, DataType dtype) {
  return std::vector<std::uint64_t>((count * dataTypeSize(dtype) + 7) / 8 + 1, 0);
}

}  // namespace chimera::testing
