// SPDX-License-Identifier: Apache-2.0
// The one hash of the library (private): what ranks compare to agree that they run the same
// plan or window, and the key of the Session's window cache. Every rank computes it alike: it
// reads only the values given (no addresses, no std::hash, whose result may differ between
// builds). FNV-1a over the bytes, finished by splitmix64 so that every input bit reaches every
// output bit, including the bits the 62-bit agreement value keeps. splitmix64 alone also
// derives the seeded input values of the benchmarks and the planner tests' simulator.
#pragma once

#include <cstdint>
#include <string_view>

namespace chimera::detail {

/// splitmix64 (Steele, Lea and Flood): a 64-bit word to a well-mixed one, every input bit
/// reaching every output bit.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Accumulates words and text into a 64-bit hash.
class Hasher {
 public:
  /// Adds the eight bytes of `word`, low byte first.
  Hasher& add(std::uint64_t word) {
    for (int shift = 0; shift < 64; shift += 8) addByte(static_cast<std::uint8_t>(word >> shift));
    return *this;
  }
  /// Adds the bytes of `text`.
  Hasher& add(std::string_view text) {
    for (const char c : text) addByte(static_cast<std::uint8_t>(c));
    return *this;
  }
  /// The hash of everything added so far.
  std::uint64_t value() const { return splitmix64(state_); }
  /// value() folded to 62 bits, so that it and its negation fit an int64 (cross-rank agreement
  /// takes the MAX of {hash, -hash}).
  std::int64_t agreementValue() const { return static_cast<std::int64_t>(value() >> 2); }

 private:
  void addByte(std::uint8_t byte) {
    state_ ^= byte;
    state_ *= 1099511628211ull;  // the FNV-1a 64-bit prime
  }

  std::uint64_t state_ = 14695981039346656037ull;  // the FNV-1a 64-bit offset basis
};

}  // namespace chimera::detail
