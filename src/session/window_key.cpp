// SPDX-License-Identifier: Apache-2.0
// Implements a recorded window's cache key and its rank-independent text.
#include <fmt/format.h>

#include <string>

#include "common/hash.hpp"
#include "exec/signature.hpp"
#include "session/window.hpp"

namespace chimera::detail {
bool overlaps(const void* a, std::size_t aBytes, const void* b, std::size_t bBytes) {
  if (a == nullptr || b == nullptr || aBytes == 0 || bBytes == 0) return false;
  const auto* a0 = static_cast<const std::byte*>(a);
  const auto* b0 = static_cast<const std::byte*>(b);
  return a0 < b0 + bBytes && b0 < a0 + aBytes;
}

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
    key.words.insert(key.words.end(),
                     {-0x7265637600ll, static_cast<std::int64_t>(r.value), static_cast<std::int64_t>(r.axis.bits()),
                      r.stageStep, static_cast<std::int64_t>(r.position)});
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
      const WindowValue& a = window.values[i];
      const WindowValue& b = window.values[j];
      if (a.storage != b.storage && overlaps(a.buffer, a.bytes, b.buffer, b.bytes)) {
        key.aliased[i] = 1;
        key.aliased[j] = 1;
      }
    }
  }
  Hasher hasher;
  for (std::int64_t w : key.words) hasher.add(static_cast<std::uint64_t>(w));
  std::vector<std::int64_t> layoutWords;
  for (const Layout& l : key.layouts) appendLayoutWords(layoutWords, l);
  for (std::int64_t w : layoutWords) hasher.add(static_cast<std::uint64_t>(w));
  key.sharedHash = hasher.agreementValue();
  for (std::uint8_t a : key.aliased) hasher.add(a);
  for (std::uint8_t u : key.uncovered) hasher.add(u);
  key.hash = hasher.value();
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
