// SPDX-License-Identifier: Apache-2.0
// Implements TensorSpec and Box: shapes, element counts, box arithmetic.
#include "chimera/tensor_spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>

#include "core/check.hpp"

namespace chimera {

std::int64_t Box::volume() const {
  std::int64_t v = 1;
  for (auto e : extent) v *= e;
  return v;
}

bool Box::empty() const {
  return std::any_of(extent.begin(), extent.end(), [](std::int64_t e) { return e <= 0; });
}

Box Box::intersect(const Box& other) const {
  CHIMERA_ASSERT(offset.size() == other.offset.size());
  Box out;
  out.offset.resize(offset.size());
  out.extent.resize(offset.size());
  for (std::size_t d = 0; d < offset.size(); ++d) {
    const std::int64_t lo = std::max(offset[d], other.offset[d]);
    const std::int64_t hi = std::min(offset[d] + extent[d], other.offset[d] + other.extent[d]);
    out.offset[d] = lo;
    out.extent[d] = std::max<std::int64_t>(0, hi - lo);
  }
  return out;
}

bool Box::contains(const Box& other) const {
  for (std::size_t d = 0; d < offset.size(); ++d) {
    if (other.offset[d] < offset[d] || other.offset[d] + other.extent[d] > offset[d] + extent[d]) return false;
  }
  return true;
}

Box Box::relativeTo(const std::vector<std::int64_t>& origin) const {
  Box out = *this;
  for (std::size_t d = 0; d < offset.size(); ++d) out.offset[d] -= origin[d];
  return out;
}

std::string Box::toString() const {
  std::string text = "[";
  for (std::size_t d = 0; d < offset.size(); ++d) {
    if (d > 0) text += ',';
    text += fmt::format("{}:{}", offset[d], offset[d] + extent[d]);
  }
  return text + "]";
}

Status TensorSpec::parseShape(std::string_view text, std::vector<std::int64_t>& out) {
  std::vector<std::int64_t> shape;
  CHIMERA_CHECK_ARG(!text.empty(), "empty shape (expected e.g. \"8192,2048\")");
  std::string_view rest = text;
  std::int64_t elements = 1;
  while (true) {
    const auto sep = rest.find_first_of(",x");
    const std::string_view part = rest.substr(0, sep);
    std::int64_t extent = 0;
    const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), extent);
    CHIMERA_CHECK_ARG(!part.empty() && ec == std::errc() && ptr == part.data() + part.size(),
                      "malformed extent '{}' in shape \"{}\"", part, text);
    CHIMERA_CHECK_ARG(extent >= 1, "extent {} in shape \"{}\" must be >= 1", extent, text);
    CHIMERA_CHECK_ARG(elements <= std::numeric_limits<std::int64_t>::max() / 8 / extent,
                      "shape \"{}\" has too many elements", text);
    elements *= extent;
    shape.push_back(extent);
    if (sep == std::string_view::npos) break;
    rest = rest.substr(sep + 1);
  }
  CHIMERA_CHECK_ARG(shape.size() <= 8, "shape \"{}\" has {} dimensions; at most 8 are supported", text, shape.size());
  out = std::move(shape);
  return Status::ok();
}

std::int64_t TensorSpec::numElements() const {
  std::int64_t n = 1;
  for (auto e : shape) n *= e;
  return n;
}

std::int64_t TensorSpec::bytes() const { return numElements() * static_cast<std::int64_t>(dataTypeSize(dtype)); }

Box TensorSpec::fullBox() const {
  Box box;
  box.offset.assign(shape.size(), 0);
  box.extent = shape;
  return box;
}

std::string TensorSpec::toString() const {
  std::string text;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) text += 'x';
    text += std::to_string(shape[d]);
  }
  return fmt::format("{} {}", text, dataTypeName(dtype));
}

}  // namespace chimera
