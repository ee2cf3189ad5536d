// SPDX-License-Identifier: Apache-2.0
// Implements a recorded window's cache key and its rank-independent text.
#include <fmt/format.h>

#include <string>

#include "session/window.hpp"

namespace chimera::detail {
namespace {

std::uint64_t mix(std::uint64_t hash, std::uint64_t word) {
  hash ^= word + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
  return hash;
}

// The splitmix64 finaliser: every input bit reaches every output bit. `mix` alone leaves a
// difference in the last word in the low bits, which the 62-bit shared hash drops.
std::uint64_t avalanche(std::uint64_t h) {
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

// Placements only; the split order of nested shards is left to the full comparison.
std::uint64_t layoutHash(std::uint64_t hash, const Layout& layout) {
  for (int axis = 0; axis < layout.mesh().numAxes(); ++axis) {
    const Placement& p = layout.placement(axis);
    hash = mix(hash, static_cast<std::uint64_t>(p.kind) | (static_cast<std::uint64_t>(p.dim) << 8) |
                         (static_cast<std::uint64_t>(p.op) << 24) | (static_cast<std::uint64_t>(p.stage) << 32));
  }
  return hash;
}

bool overlaps(const WindowValue& a, const WindowValue& b) {
  if (a.buffer == nullptr || b.buffer == nullptr || a.bytes == 0 || b.bytes == 0) return false;
  const auto* a0 = static_cast<const std::byte*>(a.buffer);
  const auto* b0 = static_cast<const std::byte*>(b.buffer);
  return a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

}  // namespace

WindowKey windowKey(const Window& window, int rank) {
  WindowKey key;
  key.words.reserve(window.values.size() * 4 + window.calls.size() * 9);
  for (const WindowValue& v : window.values) {
    if (v.producer >= 0) continue;
    key.words.push_back(static_cast<std::int64_t>(v.spec.dtype));
    key.words.push_back(v.spec.rank());
    key.words.insert(key.words.end(), v.spec.shape.begin(), v.spec.shape.end());
    key.layouts.push_back(v.layout);
  }
  for (const WindowCall& c : window.calls) {
    key.words.insert(key.words.end(),
                     {static_cast<std::int64_t>(c.op.kind), static_cast<std::int64_t>(c.op.axes.bits()), c.op.dim,
                      c.op.toDim, c.op.root, c.op.stageStep, static_cast<std::int64_t>(c.input),
                      static_cast<std::int64_t>(c.output), c.inPlace ? 1 : 0});
  }
  for (const WindowReceive& r : window.receives) {
    key.words.insert(key.words.end(), {-0x7265637600ll, static_cast<std::int64_t>(r.value),
                                       static_cast<std::int64_t>(r.axis.bits()), r.stageStep,
                                       static_cast<std::int64_t>(r.position)});
  }
  for (std::size_t i = 0; i < window.values.size(); ++i) {
    if (!window.values[i].declared) continue;
    key.words.push_back(-1 - static_cast<std::int64_t>(i));
    key.layouts.push_back(*window.values[i].declared);
  }
  for (std::size_t i = 0; i < window.values.size(); ++i) {
    const WindowValue& v = window.values[i];
    if (!v.declaredRange) continue;
    key.words.push_back(-1 - static_cast<std::int64_t>(window.values.size() + i));
    appendUncovered(v.layout, v.spec, rank, *v.declaredRange, rangeCandidates(v.layout, v.spec), key.uncovered);
  }
  key.aliased.assign(window.values.size(), 0);
  for (std::size_t i = 0; i < window.values.size(); ++i) {
    for (std::size_t j = i + 1; j < window.values.size(); ++j) {
      if (window.values[i].storage != window.values[j].storage && overlaps(window.values[i], window.values[j])) {
        key.aliased[i] = 1;
        key.aliased[j] = 1;
      }
    }
  }
  std::uint64_t hash = 1469598103934665603ull;
  for (std::int64_t w : key.words) hash = mix(hash, static_cast<std::uint64_t>(w));
  for (const Layout& l : key.layouts) hash = layoutHash(hash, l);
  hash = avalanche(hash);
  key.sharedHash = static_cast<std::int64_t>(hash >> 2);
  for (std::uint8_t a : key.aliased) hash = mix(hash, a);
  for (std::uint8_t u : key.uncovered) hash = mix(hash, u);
  key.hash = hash;
  return key;
}

std::string windowText(const Window& window) {
  std::string text;
  for (std::size_t i = 0; i < window.values.size(); ++i) {
    const WindowValue& v = window.values[i];
    if (v.producer < 0) {
      text += fmt::format("v{} = {} {} {}; ", i, v.received ? "received" : "tensor", v.spec.toString(),
                          v.layout.toString());
    }
  }
  for (const WindowCall& c : window.calls) {
    const Mesh& mesh = window.values[c.input].layout.mesh();
    text += fmt::format("v{} = {}(v{}){}; ", c.output, c.op.toString(mesh), c.input, c.inPlace ? " in place" : "");
  }
  for (std::size_t i = 0; i < window.values.size(); ++i) {
    if (window.values[i].declared) text += fmt::format("consume v{} as {}; ", i, window.values[i].declared->toString());
    if (window.values[i].declaredRange) text += fmt::format("consume v{} bytes; ", i);
  }
  return text;
}

}  // namespace chimera::detail
